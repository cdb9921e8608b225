"""Record batches as a broker serves them, for the tests of the raw paths' byte handling."""
from __future__ import annotations

import random
import struct

import crc32c
from kmigrate.kafka import wire
from kmigrate.kafka.varint import varint


def as_fetched(batch: bytes, base_offset: int, attributes: int, producer_id: int) -> bytes:
    """The batch as a broker would serve it: its base offset, a producer id, other attributes."""
    body = bytearray(batch[21:])
    struct.pack_into(">h", body, 0, attributes)
    struct.pack_into(">qhi", body, 22, producer_id, 3, 17)
    return struct.pack(">qiib", base_offset, len(batch) - 12, 5, 2) + struct.pack(">I", crc32c.crc32c(body)) + bytes(body)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """The signed (zigzag) varint at `pos`, decoded here, and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7


def _bytes(value: bytes | None) -> bytes:
    return varint(-1) if value is None else varint(len(value)) + value


def v2_batch(base: int, records: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]],
           attributes: int = 0) -> wire.Batch:
    """A v2 batch at `base` of (timestamp, key, value, headers) records."""
    base_ts = records[0][0]
    body = b""
    for delta, (ts, key, value, headers) in enumerate(records):
        record = (b"\x00" + varint(ts - base_ts) + varint(delta) + _bytes(key) + _bytes(value) + varint(len(headers))
                  + b"".join(varint(len(k)) + k.encode() + _bytes(v) for k, v in headers))
        body += varint(len(record)) + record
    header = struct.pack(">qiibIhiqqqhii", base, 49 + len(body), -1, 2, 0, attributes, len(records) - 1, base_ts,
                         max(r[0] for r in records), 7, 0, 0, len(records))
    data = header + body
    return wire.Batch(memoryview(bytearray(data)), base, base + len(records) - 1, attributes, len(records))


def records_of(batch: wire.Batch) -> list[tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]]:
    """(offset, timestamp, key, value, headers) of each record."""
    data = bytes(batch.data)
    base, length = struct.unpack_from(">qi", data, 0)
    assert length == len(data) - 12
    base_ts, count = struct.unpack_from(">q", data, 27)[0], struct.unpack_from(">i", data, 57)[0]
    pos, out = 61, []

    def read_bytes(pos: int) -> tuple[bytes | None, int]:
        size, pos = read_varint(data, pos)
        return (None, pos) if size < 0 else (data[pos:pos + size], pos + size)

    for _ in range(count):
        size, pos = read_varint(data, pos)
        end = pos + size
        ts_delta, at = read_varint(data, pos + 1)
        offset_delta, at = read_varint(data, at)
        key, at = read_bytes(at)
        value, at = read_bytes(at)
        headers_count, at = read_varint(data, at)
        headers = []
        for _ in range(headers_count):
            name, at = read_bytes(at)
            header_value, at = read_bytes(at)
            headers.append((name.decode(), header_value))
        assert at == end
        out.append((base + offset_delta, base_ts + ts_delta, key, value, headers))
        pos = end
    assert pos == len(data) and len(out) == batch.last_offset - batch.base_offset + 1 == batch.records
    return out


def random_batches(rng: random.Random, start: int, count: int) -> list[wire.Batch]:
    batches, offset, now = [], start, 1_790_000_000_000
    for _ in range(count):
        records = []
        for _ in range(rng.randint(1, 6)):
            now += rng.randint(-500, 90_000)  # a producer's own timestamps go back now and then
            records.append((now, rng.choice([None, rng.randbytes(rng.randint(0, 40))]),
                            rng.choice([None, rng.randbytes(rng.randint(0, 3000))]),
                            [(f"h{i}", rng.choice([None, rng.randbytes(5)])) for i in range(rng.randint(0, 2))]))
        batches.append(v2_batch(offset, records))
        offset += len(records)
    return batches
