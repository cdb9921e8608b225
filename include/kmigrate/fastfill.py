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
import socket
import struct
from typing import Any

import crc32c
import zstandard
from confluent_kafka.admin import AdminClient

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyError, OffsetMismatch
from kmigrate.records import FILLER_HEADER, FILLER_KEY

PRODUCE_API_KEY = 0
PRODUCE_VERSION = 7            # supported by Kafka 2.1 through 4.x
COMPRESSION_ZSTD = 4
FILLER_TIMESTAMP_MS = 0
KAFKA_ERRORS = {
    1: "OFFSET_OUT_OF_RANGE", 2: "CORRUPT_MESSAGE", 3: "UNKNOWN_TOPIC_OR_PARTITION", 6: "NOT_LEADER_OR_FOLLOWER",
    7: "REQUEST_TIMED_OUT", 10: "MESSAGE_TOO_LARGE", 19: "NOT_ENOUGH_REPLICAS", 29: "TOPIC_AUTHORIZATION_FAILED",
    76: "UNSUPPORTED_COMPRESSION_TYPE", 87: "INVALID_RECORD",
}


def supported(cluster: ClusterConfig) -> bool:
    return str(cluster.settings.get("security.protocol", "PLAINTEXT")).upper() == "PLAINTEXT"


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


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def _produce_request(correlation_id: int, topic: str, partition: int, batch: bytes, timeout_ms: int) -> bytes:
    body = b"".join((
        struct.pack(">hhi", PRODUCE_API_KEY, PRODUCE_VERSION, correlation_id), _string("kmigrate-fastfill"),
        struct.pack(">h", -1),                    # transactional id: null
        struct.pack(">hi", -1, timeout_ms),       # acks=all
        struct.pack(">i", 1), _string(topic),
        struct.pack(">i", 1), struct.pack(">ii", partition, len(batch)), batch,
    ))
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    buf = bytearray()
    while len(buf) < size:
        chunk = sock.recv(size - len(buf))
        if not chunk:
            raise ConnectionError("broker closed the connection")
        buf += chunk
    return bytes(buf)


def _read_response(sock: socket.socket) -> tuple[int, int, int]:
    """(correlation id, error code, base offset) of a one-partition Produce v7 response."""
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    data = _recv_exact(sock, size)
    correlation_id, _topics = struct.unpack_from(">ii", data, 0)
    (name_len,) = struct.unpack_from(">h", data, 8)
    pos = 10 + name_len + 4                       # skip topic name and partition count
    _index, error_code, base_offset = struct.unpack_from(">ihq", data, pos)
    return correlation_id, error_code, base_offset


def _leader_address(cluster: ClusterConfig, topic: str, partition: int) -> tuple[str, int]:
    meta = AdminClient(cluster.admin()).list_topics(topic, timeout=30)
    leader = meta.topics[topic].partitions[partition].leader
    broker = meta.brokers[leader]
    return broker.host, broker.port


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
    host, port = _leader_address(cluster, topic, partition)
    expected: dict[int, tuple[int, int]] = {}       # correlation id -> (expected base offset, records)
    next_offset = start_offset
    with socket.create_connection((host, port), timeout=timeout_ms / 1000 + 10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for correlation_id, size in enumerate(sizes):
            sock.sendall(_produce_request(correlation_id, topic, partition, filler_batch(size), timeout_ms))
            expected[correlation_id] = (next_offset, size)
            next_offset += size
            while len(expected) >= in_flight or (correlation_id == len(sizes) - 1 and expected):
                _check(sock, expected, topic, partition)
    return count


def _check(sock: socket.socket, expected: dict[int, tuple[int, int]], topic: str, partition: int) -> Any:
    correlation_id, error_code, base_offset = _read_response(sock)
    want, _size = expected.pop(correlation_id)
    if error_code != 0:
        name = KAFKA_ERRORS.get(error_code, f"error {error_code}")
        raise CopyError(f"{topic}[{partition}]: writing alignment fillers at offset {want} failed: {name}; "
                        "check the target broker log", topic=topic, partition=partition)
    if base_offset != want:
        raise OffsetMismatch(topic, partition, want, base_offset)
