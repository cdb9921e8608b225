"""Alignment fillers at millions of offsets per second (docs/DESIGN.md §4.2).

A producer loop pays per record in Python and librdkafka; alignment only needs offsets to be
taken. So this module builds one RecordBatch of filler records itself and sends it in raw Produce
requests to the partition leader, over and over: a batch's bytes do not depend on its base offset
(the broker assigns it, and the CRC does not cover it), so the same records serve every chunk, each
sent with its own producer sequence number. Each response carries the batch's base offset, which
must equal the expected offset (the KAFKA-2260 check, per batch). Used on every cluster the raw
connection reaches (`transport.raw_capable`); the others take the producer path.

What the broker spends per offset decides the speed, so the records are as small as they can be
and the batch is not compressed (the broker would decompress and walk every record): measured on
the local stack, uncompressed keyless 100k-record batches take 6-13 M offsets/s where zstd batches
of keyed records took 3-4 M. Only the last record of each batch carries the filler key and header
(`records.is_filler`): after a crash, the resume check looks at the target's last record, and a
batch is appended whole or not at all, so the last record is always a marked one. Compacted
topics refuse keyless records, so there every record gets a one-byte key.
"""
from __future__ import annotations

import functools
import itertools
import struct

import crc32c
from confluent_kafka.admin import AdminClient

from kmigrate.config import ClusterConfig
from kmigrate.kafka import leaders, wire
from kmigrate.kafka.records import FILLER_HEADER, FILLER_KEY
from kmigrate.kafka.varint import varint

COMPRESSION_NONE = 0
FILLER_TIMESTAMP_MS = 0
ANONYMOUS_KEY = b"f"


def _record(offset_delta: int, key: bytes | None, marked: bool) -> bytes:
    body = b"".join((
        b"\x00", varint(0), varint(offset_delta),                        # attributes, timestamp/offset deltas
        varint(-1) if key is None else varint(len(key)) + key, varint(-1),  # key, null value
        varint(1) + varint(len(FILLER_HEADER)) + FILLER_HEADER.encode() + varint(1) + b"1" if marked
        else varint(0)))
    return varint(len(body)) + body


def _records(count: int, keyed: bool) -> bytes:
    """`count` filler records, offset deltas 0..count-1; only the last one is marked. Only the
    offset delta differs between the unmarked ones (this runs for hundreds of thousands)."""
    key = ANONYMOUS_KEY if keyed else None
    head = b"\x00" + varint(0)
    tail = (varint(-1) if key is None else varint(len(key)) + key) + varint(-1) + varint(0)
    fixed = len(head) + len(tail)
    out = [varint(fixed + len(d)) + head + d + tail for d in map(varint, range(count - 1))]
    out.append(_record(count - 1, FILLER_KEY, True))
    return b"".join(out)


@functools.lru_cache(maxsize=8)
def filler_batch(count: int, keyed: bool = False) -> bytes:
    """A v2 RecordBatch of `count` filler records, uncompressed, base offset 0. `keyed`: every
    record has a key (compacted topics require one)."""
    after_crc = struct.pack(
        ">hiqqqhii", COMPRESSION_NONE, count - 1, FILLER_TIMESTAMP_MS, FILLER_TIMESTAMP_MS, -1, -1, -1, count,
    ) + _records(count, keyed)
    after_length = struct.pack(">ibI", -1, 2, crc32c.crc32c(after_crc)) + after_crc
    return struct.pack(">qi", 0, len(after_length)) + after_length


def write_fillers(cluster: ClusterConfig, topic: str, partition: int, start_offset: int, count: int, *,
                  keyed: bool = False, max_batch_bytes: int = 1_000_000, batch_records: int = 100_000,
                  in_flight: int = 5, timeout_ms: int = 30_000, admin: AdminClient | None = None) -> int:
    """Append `count` filler records at offsets [start_offset, start_offset + count); returns count.
    Every batch's base offset is checked against the expected one. Batches stay under
    `max_batch_bytes` (the target topic's max.message.bytes); `keyed` for compacted topics."""
    if count <= 0:
        return 0
    batch_records = min(batch_records, count)
    while len(filler_batch(batch_records, keyed)) > max_batch_bytes and batch_records > 1:
        batch_records //= 2
    sizes = [batch_records] * (count // batch_records) + ([count % batch_records] if count % batch_records else [])
    starts = list(itertools.accumulate([start_offset] + sizes[:-1]))
    with leaders.connect_to_leader(cluster, topic, partition, client_id="kmigrate-fastfill", admin=admin) as conn:
        wire.produce_at(conn, topic, partition, ((filler_batch(size, keyed), at) for size, at in zip(sizes, starts)),
                        "alignment fillers", in_flight, timeout_ms)
    return count
