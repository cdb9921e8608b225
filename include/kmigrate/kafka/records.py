"""Reading a partition's visible records, and the ordered content digest of docs/DESIGN.md §4.6."""
from __future__ import annotations

import contextlib
import hashlib
import heapq
import itertools
import struct
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import TIMESTAMP_NOT_AVAILABLE, Consumer, KafkaError, KafkaException, TopicPartition

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyInterrupted, SourceNotReady
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.pool import Pool, identity

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
        self.records_below = 0  # records below the split offset given to partition_digest

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
        self.update(msg.offset(), msg.key(), msg.value(), msg.headers(), timestamp_of(msg))

    def hexdigest(self) -> str:
        return self._hash.hexdigest()

    def absorb(self, other_digest: bytes, records: int) -> ContentDigest:
        """Count in what another comparison settled (the batch comparison's hash of its prefix)."""
        self._hash.update(other_digest)
        self.records += records
        return self


def timestamp_of(msg: Any) -> int:
    """A record's timestamp as a consumer sees it: -1 for one without (message format v0, which
    librdkafka reports as 0 of type "not available"; Kafka's own clients as -1)."""
    kind, value = msg.timestamp()
    return -1 if kind == TIMESTAMP_NOT_AVAILABLE else value


def is_filler(msg: Any) -> bool:
    headers = msg.headers() or []
    return msg.key() == FILLER_KEY and any(name == FILLER_HEADER for name, _ in headers)


def reader(cluster: ClusterConfig, **overrides: Any) -> Consumer:
    """A consumer for reading partitions by assignment: read_committed, no commits, large fetches."""
    return cluster.client(Consumer, cluster.consumer("kmigrate-reader", **{
        "fetch.max.bytes": 64 * 1024 * 1024,
        "max.partition.fetch.bytes": 16 * 1024 * 1024,
        "fetch.wait.max.ms": 5,
        "queued.max.messages.kbytes": 256 * 1024,
        # an offset below the log start (records deleted, or removed by retention, while reading) is an
        # error, not a silent jump to the new log start: the copier resumes and aligns to it
        "auto.offset.reset": "error",
        **overrides,
    }))


readers: Pool[Consumer] = Pool(Consumer.close)


def shared_reader(cluster: ClusterConfig) -> contextlib.AbstractContextManager[Consumer]:
    """A `reader` from this process's pool: a worker verifying partition after partition does not
    start a client (and its connections) for each."""
    return readers.use(identity(cluster), lambda: reader(cluster))


def learn_topic(consumer: Consumer, topic: str, timeout_s: float = 2.0) -> None:
    """Have `consumer` look `topic` up now. librdkafka asks for the leaders of a topic new to a
    client only on its next topic scan, up to a second after the assignment: measured, 1.0 s for
    the first 100 records of each topic, 0.007 s with this lookup first (one Metadata round). A
    lookup that fails or takes longer than `timeout_s` (no broker answers) is left to the
    assignment's own."""
    try:
        consumer.list_topics(topic, timeout=timeout_s)
    except KafkaException:
        pass


def iter_range(consumer: Consumer, topic: str, partition: int, start: int, end: int, *,
               idle_timeout_s: float = 30.0, batch: int = 10000,
               idle_check: Callable[[], None] | None = None) -> Iterator[list[Any]]:
    """Yield lists of visible messages with offsets in [start, end), in order, until the
    partition's read position reaches `end`. Raises SourceNotReady when the position stops
    short of `end` for `idle_timeout_s` (an open transaction holds the stable offset back, or
    the partition was truncated); `idle_check` after each poll that brought nothing (a copy's
    guard: a mirror's term ended while its source is gone is seen now, not after the wait). A
    pooled consumer may still deliver what an earlier read of it fetched (another partition's end,
    an offset out of range below where this read starts): only this read's partition counts, and
    an offset out of range is believed once the partition's log start, asked again, lies above the
    position."""
    if end <= start:
        return
    learn_topic(consumer, topic)
    consumer.assign([TopicPartition(topic, partition, start)])
    position = start
    last_progress = time.monotonic()
    stale = 0
    try:
        while position < end:
            # never ask for more than remains: consume() waits for a full batch until its timeout
            messages = consumer.consume(max(1, min(batch, end - position)), timeout=0.005)
            out = []
            for msg in messages:
                if msg.topic() != topic or msg.partition() != partition:
                    continue  # an earlier read's, delivered late
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        position = max(position, msg.offset())
                        continue
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        if stale < 3 and not _below_log_start(consumer, topic, partition, position):
                            stale += 1  # an answer to an earlier read: read on from here
                            consumer.assign([TopicPartition(topic, partition, position)])
                            break
                        raise CopyInterrupted(
                            f"{topic}[{partition}]: offset {position} is below the log start now (records were deleted, "
                            "or removed by retention, while they were read)", topic=topic, partition=partition)
                    raise KafkaException(err)
                offset = msg.offset()
                if offset < position:
                    continue  # an earlier read's, delivered late
                if offset >= end:
                    position = end
                    break
                out.append(msg)
                position = offset + 1
            if out:
                last_progress = time.monotonic()
                yield out
                continue
            if idle_check is not None and position < end:
                idle_check()
            if position < end and time.monotonic() - last_progress > idle_timeout_s:
                raise SourceNotReady(
                    f"{topic}[{partition}]: reading stopped at offset {position}, short of {end}, for "
                    f"{idle_timeout_s:.0f}s; an open transaction may hold the last stable offset back, or the "
                    "partition was truncated. Finish or abort the transaction (or wait for its timeout) and retry",
                    topic=topic, partition=partition)
    finally:
        consumer.unassign()


def _below_log_start(consumer: Consumer, topic: str, partition: int, position: int) -> bool:
    """Whether `position` lies below the partition's log start, as its leader says now (True when it
    does not answer: the offset out of range is believed)."""
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
    except KafkaException:
        return True
    return position < low


def read_range(cluster: ClusterConfig, topic: str, partition: int, start: int, end: int,
               idle_timeout_s: float = 30.0) -> list[Any]:
    with shared_reader(cluster) as consumer:
        return [m for chunk in iter_range(consumer, topic, partition, start, end, idle_timeout_s=idle_timeout_s)
                for m in chunk]


def partition_digest(cluster: ClusterConfig, topic: str, partition: int, start: int, end: int,
                     offset_of: Callable[[int], int | None] | None = None,
                     split_at: int | None = None) -> ContentDigest:
    """Digest of the visible records in [start, end). `offset_of` maps each record's offset to the
    one it is hashed under (translate mode: the target offset); records it maps to None are
    counted in `unmapped` and left out. Records below `split_at` are also counted in
    `records_below`."""
    digest = ContentDigest()
    with shared_reader(cluster) as consumer:
        for chunk in iter_range(consumer, topic, partition, start, end):
            if split_at is not None:
                digest.records_below += sum(1 for msg in chunk if msg.offset() < split_at)
            for msg in chunk:
                if offset_of is None:
                    digest.update_message(msg)
                    continue
                mapped = offset_of(msg.offset())
                if mapped is None:
                    digest.unmapped += 1
                else:
                    digest.update(mapped, msg.key(), msg.value(), msg.headers(), timestamp_of(msg))
    return digest


Record = tuple[int, "bytes | None", "bytes | None", Any, int]  # offset, key, value, headers, timestamp


def record_of(msg: Any) -> Record:
    """A consumed record as the comparisons take it: (offset, key, value, headers, timestamp)."""
    return msg.offset(), msg.key(), msg.value(), msg.headers(), timestamp_of(msg)


def _key_id(key: bytes) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


def _changed_fields(source: Record, target: Record) -> list[str]:
    # headers None and [] hash alike in ContentDigest, so they compare alike here
    pairs = (("key", source[1], target[1]), ("value", source[2], target[2]),
             ("headers", source[3] or [], target[3] or []), ("timestamp", source[4], target[4]))
    return [name for name, a, b in pairs if a != b]


def compacted_differences_of(source_records: Iterable[Record], target_records: Callable[[], Iterable[Record]],
                             limit: int = 10, *,
                             later_source_records: Callable[[], Iterable[Record]] | None = None,
                             later_target_records: Callable[[], Iterable[Record]] | None = None,
                             target_only_ok: bool = False) -> tuple[int, list[str]]:
    """(source records compared, problems) of a compacted partition, all records in ascending
    offset order: every source record must be on the target at its offset, unchanged, unless the
    target's cleaner removed it (a later target record has its key, or, with `later_target_records`,
    a target record after the compared range has it: the mirror writes on while a live range is
    verified, and the target's cleaner may run first); a record only the target holds
    must be one the source's cleaner removes: a tombstone, or superseded (a later target record has
    its key, or, with `later_source_records`, a source record after the compared range has it), or
    with `target_only_ok` any (the copier's resume check: is the target a copy of this source?). At
    most `limit` problems by offset, then "... and N more".

    `target_records` is called twice: a first pass learns each key's last target offset, by a
    16-byte hash of the key, so memory grows with the keys, not the records. `later_source_records`
    is called at most once, only when a target-only record is the last of its key on the target,
    and read until each such key is found; `later_target_records` likewise, only when a source record
    with a key is missing on the target and no later target record in the range has its key (at most
    `limit` offsets a key are kept meanwhile, and a count)."""
    last: dict[bytes, int] = {}
    for offset, key, _, _, _ in target_records():
        if key is not None:
            last[_key_id(key)] = offset
    found: list[tuple[int, str]] = []  # the first `limit` problems of the merge, by offset
    count = compared = 0
    unsuperseded: dict[bytes, tuple[int, str]] = {}  # key id -> its target-only last record's problem
    removed: dict[bytes, tuple[int, list[int]]] = {}  # key id -> (count, first offsets) missing on the target

    def problem(offset: int, text: str) -> None:
        nonlocal count
        count += 1
        if len(found) < limit:
            found.append((offset, text))

    def missing(offset: int) -> str:
        return f"offset {offset}: on the source, missing on the target"

    def target_only(record: Record) -> None:
        offset, key, value = record[0], record[1], record[2]
        if target_only_ok:
            return
        if key is None:
            problem(offset, f"offset {offset}: a record without a key on the target only (the source holds no "
                            "record at it; a cleaner removes only records with keys)")
        elif value is not None and last.get(key_id := _key_id(key), -1) <= offset:
            unsuperseded[key_id] = (offset, f"offset {offset}: key {key[:40]!r} on the target only, not superseded "
                                            "(the source holds no record at it nor a later one of its key: a "
                                            "tombstone the source's cleaner removed before it was copied, when "
                                            "the source's delete.retention.ms is shorter than the time between "
                                            "copy rounds, leaves this; copy the topic again into an empty target)")

    targets = iter(target_records())
    pending = next(targets, None)
    for record in source_records:
        compared += 1
        offset = record[0]
        while pending is not None and pending[0] < offset:
            target_only(pending)
            pending = next(targets, None)
        if pending is None or pending[0] != offset:
            if record[1] is None:
                problem(offset, missing(offset))
            elif last.get(key_id := _key_id(record[1]), -1) <= offset:
                if later_target_records is None:
                    problem(offset, missing(offset))
                else:  # unless a later target record past the range has its key
                    count_of, offsets = removed.get(key_id, (0, []))
                    removed[key_id] = (count_of + 1, offsets if len(offsets) >= limit else offsets + [offset])
            continue
        changed = _changed_fields(record, pending)
        if changed:
            problem(offset, f"offset {offset}: the target's record differs from the source's ({', '.join(changed)})")
        pending = next(targets, None)
    while pending is not None:
        target_only(pending)
        pending = next(targets, None)
    if unsuperseded and later_source_records is not None:
        for _, key, _, _, _ in later_source_records():
            if key is not None:
                unsuperseded.pop(_key_id(key), None)
                if not unsuperseded:
                    break
    if removed and later_target_records is not None:
        for _, key, _, _, _ in later_target_records():
            if key is not None:
                removed.pop(_key_id(key), None)
                if not removed:
                    break
    gone = sorted((offset, missing(offset)) for _, offsets in removed.values() for offset in offsets)
    total = count + len(unsuperseded) + sum(count_of for count_of, _ in removed.values())
    problems = [text for _, text in itertools.islice(heapq.merge(found, sorted(unsuperseded.values()), gone), limit)]
    if total > limit:
        problems.append(f"... and {total - limit} more")
    return compared, problems


def _records(cluster: ClusterConfig, topic: str, partition: int, start: int, end: int) -> Iterator[Record]:
    with shared_reader(cluster) as consumer, contextlib.closing(iter_range(consumer, topic, partition, start,
                                                                           end)) as chunks:
        for chunk in chunks:  # closed (unassigned) before the reader goes back to its pool
            yield from map(record_of, chunk)


def compacted_differences(source: ClusterConfig, target: ClusterConfig, topic: str, partition: int, start: int,
                          end: int, limit: int = 10, target_topic: str | None = None) -> tuple[int, list[str]]:
    """compacted_differences_of over the visible records of [start, end) on both clusters (the
    target's partition named `target_topic` where the run renames the topic). The
    source's records from `end` to its last stable offset count as later ones: on a live source a
    record in the range is cleaned once a later update of its key arrives. The target's records past
    `end` count as later ones on the target alike: a mirror copies on while a live range is verified,
    and the target's cleaner may remove a record in the range before the source's does."""

    on_target = target_topic or topic

    def later(cluster: ClusterConfig, name: str) -> Callable[[], Iterator[Record]]:
        def read() -> Iterator[Record]:
            with ClusterAdmin(cluster) as admin:
                stable = admin.stable_ends([(name, partition)], retry=True)[(name, partition)]
            return _records(cluster, name, partition, end, stable)
        return read

    return compacted_differences_of(_records(source, topic, partition, start, end),
                                    lambda: _records(target, on_target, partition, start, end), limit,
                                    later_source_records=later(source, topic),
                                    later_target_records=later(target, on_target))
