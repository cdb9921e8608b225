"""Reading a partition's visible records, and the ordered content digest of docs/DESIGN.md §4.5."""
from __future__ import annotations

import hashlib
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kmigrate.config import ClusterConfig
from kmigrate.errors import SourceNotReady

FILLER_KEY = b"__kmigrate_filler__"
FILLER_HEADER = "kmigrate.filler"

_FIELD = struct.Struct(">qqi")


def _bytes_field(data: bytes | None) -> bytes:
    # length-prefixed so that (b"a", b"bc") and (b"ab", b"c") hash differently; -1 marks null
    return struct.pack(">i", -1) if data is None else struct.pack(">i", len(data)) + data


class ContentDigest:
    """Ordered hash over (offset, key, value, headers, timestamp) of visible records."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.records = 0
        self.unmapped = 0  # records left out because they had no offset to be hashed under

    def update(self, offset: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes | None]] | None, timestamp: int) -> None:
        h = self._hash
        h.update(_FIELD.pack(offset, timestamp, len(headers) if headers else 0))
        h.update(_bytes_field(key))
        h.update(_bytes_field(value))
        if headers:
            for name, data in headers:
                h.update(_bytes_field(name.encode()))
                h.update(_bytes_field(data))
        self.records += 1

    def update_message(self, msg: Any) -> None:
        self.update(msg.offset(), msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def is_filler(msg: Any) -> bool:
    headers = msg.headers() or []
    return msg.key() == FILLER_KEY and any(name == FILLER_HEADER for name, _ in headers)


def reader(cluster: ClusterConfig, **overrides: Any) -> Consumer:
    """A consumer for reading partitions by assignment: read_committed, no commits, large fetches."""
    return Consumer(cluster.consumer("kmigrate-reader", **{
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "fetch.wait.max.ms": 50,
        "queued.max.messages.kbytes": 256 * 1024,
        **overrides,
    }))


def iter_range(consumer: Consumer, topic: str, partition: int, start: int, end: int, *,
               idle_timeout_s: float = 30.0, batch: int = 10000) -> Iterator[list[Any]]:
    """Yield lists of visible messages with offsets in [start, end), in order, until the
    partition's read position reaches `end`. Raises SourceNotReady when the position stops
    short of `end` for `idle_timeout_s` (an open transaction holds the stable offset back, or
    the partition was truncated)."""
    if end <= start:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    last_progress = time.monotonic()
    try:
        while position < end:
            # never ask for more than remains: consume() waits for a full batch until its timeout
            messages = consumer.consume(max(1, min(batch, end - position)), timeout=0.05)
            out = []
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        position = max(position, msg.offset())
                        continue
                    raise KafkaException(err)
                offset = msg.offset()
                if offset >= end:
                    position = end
                    break
                out.append(msg)
                position = offset + 1
            if out:
                last_progress = time.monotonic()
                yield out
            elif position < end and time.monotonic() - last_progress > idle_timeout_s:
                raise SourceNotReady(
                    f"{topic}[{partition}]: reading stopped at offset {position}, short of {end}, for "
                    f"{idle_timeout_s:.0f}s; an open transaction may hold the last stable offset back, or the "
                    "partition was truncated. Finish or abort the transaction (or wait for its timeout) and retry",
                    topic=topic, partition=partition)
    finally:
        consumer.unassign()


def read_range(cluster: ClusterConfig, topic: str, partition: int, start: int, end: int,
               idle_timeout_s: float = 30.0) -> list[Any]:
    consumer = reader(cluster)
    try:
        return [m for chunk in iter_range(consumer, topic, partition, start, end, idle_timeout_s=idle_timeout_s)
                for m in chunk]
    finally:
        consumer.close()


def partition_digest(cluster: ClusterConfig, topic: str, partition: int, start: int, end: int,
                     offset_of: Callable[[int], int | None] | None = None) -> ContentDigest:
    """Digest of the visible records in [start, end). `offset_of` maps each record's offset to the
    one it is hashed under (translate mode: the target offset); records it maps to None are
    counted in `unmapped` and left out."""
    consumer = reader(cluster)
    digest = ContentDigest()
    try:
        for chunk in iter_range(consumer, topic, partition, start, end):
            for msg in chunk:
                if offset_of is None:
                    digest.update_message(msg)
                    continue
                mapped = offset_of(msg.offset())
                if mapped is None:
                    digest.unmapped += 1
                else:
                    digest.update(mapped, msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])
    finally:
        consumer.close()
    return digest
