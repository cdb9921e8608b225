"""Record batches as a broker serves them, for the tests of the raw paths' byte handling."""
from __future__ import annotations

import struct

import crc32c


def as_fetched(batch: bytes, base_offset: int, attributes: int, producer_id: int) -> bytes:
    """The batch as a broker would serve it: its base offset, a producer id, other attributes."""
    body = bytearray(batch[21:])
    struct.pack_into(">h", body, 0, attributes)
    struct.pack_into(">qhi", body, 22, producer_id, 3, 17)
    return struct.pack(">qiib", base_offset, len(batch) - 12, 5, 2) + struct.pack(">I", crc32c.crc32c(body)) + bytes(body)
