"""Alignment fillers at millions of offsets per second (DESIGN 4.2).

A producer loop pays per record in Python and librdkafka; alignment only needs offsets to be
taken. So this module builds one zstd-compressed RecordBatch of filler records itself and sends
it in raw Produce requests to the partition leader, over and over: a batch's bytes do not depend
on its base offset (the broker assigns it, and the CRC does not cover it), so the same bytes serve
every chunk. Each response carries the batch's base offset, which must equal the expected offset
(the KAFKA-2260 check, per batch). Used for PLAINTEXT clusters; other security protocols take the
producer path.
"""
from __future__ import annotations

import functools
import itertools
import struct

import crc32c
import zstandard

from kmigrate import wire
from kmigrate.config import ClusterConfig
from kmigrate.records import FILLER_HEADER, FILLER_KEY

COMPRESSION_ZSTD = 4
FILLER_TIMESTAMP_MS = 0


def _varint(value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = zigzag & 0x7F
        zigzag >>= 7
        if zigzag:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _records(count: int) -> bytes:
    """`count` filler records, offset deltas 0..count-1. Only the offset delta differs between
    them, so each is a fixed prefix and suffix around it (this runs for hundreds of thousands)."""
    header_name = FILLER_HEADER.encode()
    prefix = b"\x00" + _varint(0)                  # attributes, timestamp delta
    suffix = b"".join((_varint(len(FILLER_KEY)), FILLER_KEY, _varint(-1),   # key, null value
                       _varint(1), _varint(len(header_name)), header_name, _varint(1), b"1"))
    fixed = len(prefix) + len(suffix)
    deltas = [_varint(i) for i in range(min(count, 64))]  # 1-byte deltas; longer ones below
    out = [_varint(fixed + 1) + prefix + d + suffix for d in deltas]
    out.extend(_varint(fixed + len(d)) + prefix + d + suffix
               for d in map(_varint, range(64, count)))
    return b"".join(out)


@functools.lru_cache(maxsize=8)
def filler_batch(count: int) -> bytes:
    """A v2 RecordBatch of `count` filler records, zstd-compressed, base offset 0."""
    compressed = zstandard.ZstdCompressor(level=3).compress(_records(count))
    after_crc = struct.pack(
        ">hiqqqhii", COMPRESSION_ZSTD, count - 1, FILLER_TIMESTAMP_MS, FILLER_TIMESTAMP_MS, -1, -1, -1, count,
    ) + compressed
    after_length = struct.pack(">ibI", -1, 2, crc32c.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def write_fillers(cluster: ClusterConfig, topic: str, partition: int, start_offset: int, count: int, *,
                  max_batch_bytes: int = 1_000_000, batch_records: int = 400_000, in_flight: int = 8,
                  timeout_ms: int = 30_000) -> int:
    """Append `count` filler records at offsets [start_offset, start_offset + count); returns count.
    Every batch's base offset is checked against the expected one. Batches stay under
    `max_batch_bytes` (the target topic's max.message.bytes)."""
    if count <= 0:
        return 0
    batch_records = min(batch_records, count)
    while len(filler_batch(batch_records)) > max_batch_bytes and batch_records > 1000:
        batch_records //= 2
    sizes = [batch_records] * (count // batch_records) + ([count % batch_records] if count % batch_records else [])
    starts = list(itertools.accumulate([start_offset] + sizes[:-1]))
    with wire.BrokerConnection(*wire.leader(cluster, topic, partition), client_id="kmigrate-fastfill") as conn:
        wire.produce_at(conn, topic, partition, ((filler_batch(size), at) for size, at in zip(sizes, starts)),
                        "alignment fillers", in_flight, timeout_ms)
    return count
