"""Copy one partition from the source cluster to the target so that every record keeps its offset.

The contract is DESIGN section 4: expected-offset writes (4.1), log-start alignment with fillers
and DeleteRecords (4.2), resume from the target's own end after checking its last records (4.3),
gaps rendered with transaction markers (4.4). `translate` mode copies the visible records densely
and records an exact offset map instead (section 5).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaError, Producer

from kmigrate import fastfill, wire
from kmigrate.admin import ClusterAdmin
from kmigrate.config import ClusterConfig
from kmigrate.errors import (
    CopyError,
    ForeignTarget,
    OffsetMismatch,
    SourceNotReady,
    TargetDiverged,
)
from kmigrate.records import (
    FILLER_HEADER,
    FILLER_KEY,
    ContentDigest,
    is_filler,
    iter_range,
    partition_digest,
    read_range,
    reader,
)

log = logging.getLogger(__name__)

PRESERVE = "preserve"
TRANSLATE = "translate"
FILLER_HEADERS = [(FILLER_HEADER, b"1")]


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """One partition to copy up to (not including) `end_offset`, the snapshot end."""

    topic: str
    partition: int
    end_offset: int
    mode: str = PRESERVE


@dataclasses.dataclass
class OffsetRun:
    """Source offsets [source_start, source_start + length) sit at [target_start, ...) on the target."""

    source_start: int
    target_start: int
    length: int


@dataclasses.dataclass
class PartitionResult:
    topic: str
    partition: int
    mode: str
    source_log_start: int
    end_offset: int
    target_start: int          # the target's end when this run began (resume point)
    target_end: int
    records: int = 0           # visible records copied by this run
    bytes: int = 0             # key + value bytes of records copied one by one, plus the wire size
                               # of record batches copied whole
    whole_batches: int = 0     # record batches copied byte for byte (the rest went record by record)
    fillers: int = 0           # alignment and gap fillers written
    markers: int = 0           # transaction markers written (commits + aborts)
    first_offset: int | None = None
    last_offset: int | None = None
    offset_map: list[OffsetRun] = dataclasses.field(default_factory=list)
    source_digest: str | None = None
    target_digest: str | None = None
    digests_equal: bool | None = None
    align_seconds: float = 0.0
    copy_seconds: float = 0.0
    verify_seconds: float = 0.0

    def as_row(self) -> dict[str, Any]:
        row = dataclasses.asdict(self)
        row["offset_map"] = [[r.source_start, r.target_start, r.length] for r in self.offset_map]
        return row


@dataclasses.dataclass(frozen=True)
class CopyOptions:
    run_id: str = "default"
    check_every: int = 5000          # delivery reports checked: first and last of each chunk of this size
    resume_window: int = 64          # target records compared with the source before resuming
    idle_timeout_s: float = 30.0
    verify: bool = True              # read both sides back and compare digests over [log start, end)
    fast_alignment: bool = True      # hand-built filler batches (PLAINTEXT targets); else the producer
    raw_batches: bool = True         # copy plain record batches whole (PLAINTEXT clusters); else record by record
    fetch_max_bytes: int = 16 << 20  # per fetch of whole batches
    max_message_bytes: int = 1_048_576 + 65_536
    producer_overrides: tuple[tuple[str, Any], ...] = ()
    # test hook: called with the count of records handed to the producer so far
    progress_hook: Callable[[int], None] | None = None


BULK_BATCH_BYTES = 4 * 1024 * 1024


def bulk_batch_bytes(max_message_bytes: int) -> int:
    """The producer's batch size for a target topic whose max.message.bytes is given: at most
    BULK_BATCH_BYTES, and small enough that a full batch, lz4-compressed, stays under the limit.
    librdkafka limits a batch by its uncompressed size, and lz4 makes incompressible data
    slightly larger (by up to 1/255 plus framing): a batch at the limit would be refused whole."""
    return max(16 * 1024, min(BULK_BATCH_BYTES, max_message_bytes - max_message_bytes // 128 - 4096))


def transactional_id(run_id: str, topic: str, partition: int) -> str:
    """Derived from the run and the target partition, so a stale copier of the same partition is fenced."""
    return f"kmigrate-{run_id}-{topic}-{partition}"


class _Writer:
    """Writes records to one target partition at expected offsets.

    Bulk records go through an idempotent producer (ordered, one writer per partition), so a
    sparse check of delivery reports is enough: if the first and last record of each chunk
    land where expected, nothing was interleaved. Transaction markers need a transactional
    producer; the two never have records in flight at the same time."""

    def __init__(self, target: ClusterConfig, topic: str, partition: int, admin: ClusterAdmin,
                 options: CopyOptions, transactional: bool) -> None:
        self.topic = topic
        self.partition = partition
        self.admin = admin
        self.options = options
        self.topic_configs = admin.topic_configs(topic)  # the target topic's, read once per copy
        self.next_offset = 0
        self.fillers = 0
        self.markers = 0
        self._mismatch: OffsetMismatch | None = None
        self._failure: KafkaError | None = None
        self._fatal: KafkaError | None = None
        common = {
            "enable.idempotence": True,
            "acks": "all",
            "message.max.bytes": options.max_message_bytes,
            "error_cb": self._on_error,
        }
        self._bulk_config = {
            **common,
            "linger.ms": 20,
            "batch.size": bulk_batch_bytes(int(self.topic_configs["max.message.bytes"])),
            "batch.num.messages": 100_000,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 1024 * 1024,
            "compression.type": "lz4",
            **dict(options.producer_overrides),
        }
        # Created now, though a copy of whole batches never writes through it: librdkafka gets an
        # idempotent producer's id in the background, and when its first try races the bootstrap
        # connection (most times here) the next comes 500 ms later. A copy on the record path then
        # finds it ready; one that is not pays about 2 ms of CPU for it.
        self._bulk = Producer(target.producer(**self._bulk_config))
        self._bulk_used = False
        self._txn_config = {
            **common,
            "transactional.id": transactional_id(options.run_id, topic, partition),
            "transaction.timeout.ms": 60_000,
            "linger.ms": 0,
        } if transactional else None
        self._target = target
        self._txn: Producer | None = None
        self._txn_open = False  # between begin_transaction and its commit or abort

    @property
    def bulk(self) -> Producer:
        """The idempotent producer for records copied one by one."""
        self._bulk_used = True
        return self._bulk

    @property
    def txn(self) -> Producer:
        """The transactional producer, created on first use. `init_transactions` fences an earlier
        copier of this partition and aborts its open transaction (adding its abort marker)."""
        if self._txn is None:
            assert self._txn_config is not None, "translate mode writes no transaction markers"
            self._txn = self._connected(Producer(self._target.producer(**self._txn_config)))
            self._txn.init_transactions(30)
        return self._txn

    def _connected(self, producer: Producer) -> Producer:
        """`producer` once a broker it learned from metadata (not the bootstrap address, which
        librdkafka drops then) has answered. A transactional producer that looks for its
        coordinator in between finds no broker up and tries again 500 ms later (measured here:
        init_transactions took 0.50 s most times, 0.004 s after this)."""
        for _ in range(5):
            if producer.list_topics(self.topic, timeout=30).orig_broker_id >= 0:
                break
        return producer

    # ---------------------------------------------------------------- callbacks

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = err

    def _checker(self, expected: int) -> Callable[[KafkaError | None, Any], None]:
        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self._failure = self._failure or err
            elif msg.offset() != expected and self._mismatch is None:
                self._mismatch = OffsetMismatch(self.topic, self.partition, expected, msg.offset())
        return on_delivery

    def raise_if_failed(self) -> None:
        if self._mismatch is not None:
            raise self._mismatch
        err = self._fatal or self._failure
        if err is not None:
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise CopyError(
                    f"{self.topic}[{self.partition}]: a record is larger than the target allows ({err.str()}); "
                    "raise max.message.bytes on the target topic to at least the source topic's value",
                    topic=self.topic, partition=self.partition)
            raise CopyError(f"{self.topic}[{self.partition}]: writing to the target failed: {err.str()}",
                            topic=self.topic, partition=self.partition)

    # ---------------------------------------------------------------- bulk path

    def _produce(self, producer: Producer, key: bytes | None, value: bytes | None,
                 headers: Any, timestamp: int, check: bool) -> None:
        kwargs: dict[str, Any] = {"partition": self.partition, "key": key, "value": value, "headers": headers}
        if timestamp > 0:
            kwargs["timestamp"] = timestamp
        if check:
            kwargs["on_delivery"] = self._checker(self.next_offset)
        while True:
            try:
                producer.produce(self.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        self.next_offset += 1

    def write_one(self, msg: Any) -> None:
        """Bulk-write one record, delivery checked."""
        self._produce(self.bulk, msg.key(), msg.value(), msg.headers(), msg.timestamp()[1], True)

    def write_run(self, msgs: list[Any]) -> int:
        """Bulk-write records that take consecutive offsets from `next_offset`; returns their key +
        value bytes. The hot loop of the copy: the first and last delivery of each slice of
        `check_every` records are checked, the rest carry no callback."""
        produce, topic, partition = self.bulk.produce, self.topic, self.partition
        check_every = self.options.check_every
        count, nbytes, i = len(msgs), 0, 0
        while i < count:
            try:
                while i < count:
                    msg = msgs[i]
                    key, value, timestamp = msg.key(), msg.value(), msg.timestamp()[1]
                    if i % check_every == 0 or i == count - 1:
                        produce(topic, value, key, partition=partition, headers=msg.headers(),
                                timestamp=timestamp if timestamp > 0 else 0,
                                on_delivery=self._checker(self.next_offset + i))
                    else:
                        produce(topic, value, key, partition=partition, headers=msg.headers(),
                                timestamp=timestamp if timestamp > 0 else 0)
                    nbytes += (len(key) if key else 0) + (len(value) if value else 0)
                    i += 1
            except BufferError:
                self.bulk.poll(0.05)
        self.next_offset += count
        return nbytes

    def write_fillers(self, count: int) -> None:
        """Non-transactional fillers (alignment); every 'check_every'th and the last are checked."""
        for i in range(count):
            check = i % self.options.check_every == 0 or i == count - 1
            self._produce(self.bulk, FILLER_KEY, None, FILLER_HEADERS, 0, check)
            if i % 10000 == 0:
                self.bulk.poll(0)
                self.raise_if_failed()
        self.fillers += count

    def flush_bulk(self) -> None:
        if not self._bulk_used:
            return
        while self.bulk.flush(1.0) > 0:
            self.raise_if_failed()
        self.raise_if_failed()

    # ---------------------------------------------------------------- gaps (DESIGN 4.4)

    def commit_with_marker(self, msg: Any) -> None:
        """Write `msg` in a transaction and commit: the commit marker takes the next offset (gap of 1)."""
        self._commit_one(msg.key(), msg.value(), msg.headers(), msg.timestamp()[1])

    def commit_filler(self) -> None:
        """One filler in a committed transaction: the filler and its commit marker take two offsets
        (alignment below a log start that sits on a transaction marker)."""
        self._commit_one(FILLER_KEY, None, FILLER_HEADERS, 0)
        self.fillers += 1

    def _commit_one(self, key: bytes | None, value: bytes | None, headers: Any, timestamp: int) -> None:
        self.flush_bulk()
        self.txn.begin_transaction()
        self._txn_open = True
        self._produce(self.txn, key, value, headers, timestamp, True)
        self.txn.flush(30)
        self.raise_if_failed()
        self.txn.commit_transaction(30)
        self._txn_open = False
        self._after_marker()

    def abort_fillers(self, start: int, end: int) -> None:
        """Render the gap [start, end), end - start >= 2: end-start-1 aborted fillers and the abort marker."""
        assert end - start >= 2 and start == self.next_offset
        self.flush_bulk()
        self.txn.begin_transaction()
        self._txn_open = True
        count = end - start - 1
        for i in range(count):  # sparse delivery checks, as for bulk writes (the producer is idempotent)
            self._produce(self.txn, FILLER_KEY, None, FILLER_HEADERS, 0, i % self.options.check_every == 0 or i == count - 1)
        # librdkafka purges unsent messages on abort: make sure the fillers are written first
        self.txn.flush(30)
        self.raise_if_failed()
        self.txn.abort_transaction(30)
        self._txn_open = False
        self.fillers += count
        self._after_marker()

    def _after_marker(self) -> None:
        # The coordinator writes the marker after commit/abort returns: wait until it has landed,
        # so the next write gets the offset after it.
        marker_offset = self.next_offset
        self.next_offset += 1
        self.markers += 1
        high = self.admin.wait_for_end(self.topic, self.partition, self.next_offset)
        if high != self.next_offset:
            raise OffsetMismatch(self.topic, self.partition, marker_offset, high - 1)

    def close(self) -> None:
        """Flush, then close each producer that holds nothing more, so that its threads and
        connections end with the copy. Each producer's error callback refers back to this writer:
        without close() they live until the garbage collector finds the cycle, which in a process
        copying partition after partition may be many partitions later. A producer still holding
        records or an open transaction (a copy that failed) is left to the collector, as close()
        would wait for a broker that may not answer (measured: it hangs on a queued record)."""
        if self._bulk_used:
            self._bulk.flush(30)
        if len(self._bulk) == 0:
            self._bulk.close()
        if self._txn is not None:
            self._txn.flush(30)
            if len(self._txn) == 0 and not self._txn_open:
                self._txn.close()


def copy_partition(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                   options: CopyOptions = CopyOptions(), resume_map: Sequence[OffsetRun] = ()) -> PartitionResult:
    """Copy `unit` and return its result. Safe to re-run: preserve mode resumes from the target's
    end. Translate mode resumes from `resume_map`, the offset map of the earlier runs of this
    partition (from the run manifest); without it the target's data counts as an unrelated prefix."""
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        source_low, source_high = source_admin.watermarks(topic, partition)
        if end > source_high:
            raise SourceNotReady(
                f"{topic}[{partition}]: snapshot end {end} is beyond the source's end {source_high}; the source "
                "partition was truncated or the snapshot is from another cluster. Take a new snapshot",
                topic=topic, partition=partition)
        if source_low > end:
            raise SourceNotReady(
                f"{topic}[{partition}]: the source's log start {source_low} moved past the snapshot end {end} "
                "(retention deleted the records); take a new snapshot", topic=topic, partition=partition)
        if unit.mode == TRANSLATE:
            return _copy_translate(source, target, unit, options, source_low, target_admin, resume_map)
        writer = _Writer(target, topic, partition, target_admin, options, transactional=True)
        try:
            return _copy_preserve(source, target, unit, options, source_low, source_admin, target_admin, writer)
        finally:
            writer.close()


def _copy_preserve(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, options: CopyOptions,
                   source_low: int, source_admin: ClusterAdmin, target_admin: ClusterAdmin,
                   writer: _Writer) -> PartitionResult:
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    target_low, target_high = target_admin.watermarks(topic, partition)
    if target_high > target_low:
        # An earlier copier may have left a transaction open here: fence it and abort it (its
        # marker lands), then read the end again. An empty partition holds no such transaction.
        writer.txn  # noqa: B018 - created for its init_transactions side effect
        target_low, target_high = target_admin.watermarks(topic, partition)
    result = PartitionResult(topic, partition, PRESERVE, source_low, end, target_high, target_high)
    if target_high == end + 1 and not read_range(target, topic, partition, end, end + 1) and \
            invisible_run_at(source, source_admin, topic, partition, end) >= 1:
        end = target_high  # an earlier round wrote the commit marker that follows `end` on the source too
    if target_high > end:
        raise ForeignTarget(
            f"{topic}[{partition}]: the target already holds offsets up to {target_high}, beyond the snapshot end "
            f"{end}: producers already write to the target topic (it may be in use after a cutover), or another copy "
            "wrote it. Nothing was written. Leave this topic out of the run, or migrate it to a target where it does "
            "not exist yet",
            topic=topic, partition=partition)

    started = time.monotonic()
    if target_high <= source_low:
        lone_marker = source_low > 0 and invisible_run_at(source, source_admin, topic, partition, source_low) == 1
        target_high = _align(source_low, target_low, target_high, topic, partition, target, target_admin, writer,
                             lone_marker)
    elif target_low > source_low:
        raise ForeignTarget(
            f"{topic}[{partition}]: the target's log start {target_low} is above the source's {source_low}; records "
            "the source still has cannot be written below it. The target topic holds data of another copy or "
            "another producer: migrate this topic to a target where it does not exist yet", topic=topic,
            partition=partition)
    else:
        compared = _check_resume_point(source, target, topic, partition, max(source_low, target_low), target_high,
                                       options)
        if target_low < source_low:
            _trim_below(source_low, target_low, compared, topic, partition, target, target_admin)
    result.align_seconds = time.monotonic() - started
    writer.next_offset = target_high

    started = time.monotonic()
    copy = _PreserveCopy(source, source_admin, writer, result, options)
    try:
        if target_high < end:
            if options.raw_batches and wire.plaintext(source) and wire.plaintext(target):
                copy.by_batches(source, target, target_high, end)
            else:
                copy.by_records(target_high, end)
            copy.finish(end)
    finally:
        copy.close()
    writer.flush_bulk()
    result.copy_seconds = time.monotonic() - started

    # The target may end one offset past `end`: a commit marker after the last record, where the
    # source has one too (`finish`), or after the alignment filler below a log start on a marker.
    _, result.target_end = target_admin.watermarks(topic, partition)
    if result.target_end != max(writer.next_offset, end):
        raise OffsetMismatch(topic, partition, max(writer.next_offset, end), result.target_end)
    result.fillers, result.markers = writer.fillers, writer.markers
    if result.records:
        result.offset_map = [OffsetRun(result.first_offset, result.first_offset,
                                       result.last_offset - result.first_offset + 1)]
    if options.verify:
        verify_into(source, target, result, source_low)
    return result


def invisible_run_at(source: ClusterConfig, source_admin: ClusterAdmin, topic: str, partition: int,
                     offset: int) -> int:
    """How many offsets from `offset` on are invisible to a read_committed consumer of the source
    (transaction markers, aborted records), as far as it is decided now; 0 when `offset` holds a
    visible record, lies at or beyond the source's end, or starts a transaction still open.

    Only a run of exactly 1 needs care (DESIGN 4.4: a commit marker after the record before it),
    and this answer is final for it: a marker at `offset` belongs to a transaction with records
    below `offset`, so it was written before any record at or above them became readable; and a
    transaction that begins later at `offset + 1` adds at least 2 invisible offsets or none."""
    stable = source_admin.stable_end(topic, partition)
    if stable <= offset:
        return 0
    consumer = reader(source)
    try:
        for chunk in iter_range(consumer, topic, partition, offset, stable):
            return chunk[0].offset() - offset
    finally:
        consumer.close()
    return stable - offset


class _PreserveCopy:
    """The copy loop of preserve mode. Plain record batches are copied whole, byte for byte
    (`by_batches`); everything else goes record by record through librdkafka (`by_records`).
    Both keep one visible record of look-ahead (`held`): a gap of exactly 1 after it means it
    must be written inside a transaction whose commit marker takes the gap's offset."""

    def __init__(self, source: ClusterConfig, source_admin: ClusterAdmin, writer: _Writer, result: PartitionResult,
                 options: CopyOptions) -> None:
        self.source = source
        self.source_admin = source_admin
        self.writer = writer
        self.result = result
        self.options = options
        self.held: Any = None
        self._consumer: Any = None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()

    def _next_visible(self, offset: int) -> None:
        """Settle `held` (and any gap) now that the next visible record is at `offset`."""
        writer = self.writer
        if self.held is not None:
            gap_start = self.held.offset() + 1
            if offset == gap_start:
                writer.write_one(self.held)
            elif offset == gap_start + 1:
                writer.commit_with_marker(self.held)
            else:
                writer.write_one(self.held)
                writer.abort_fillers(gap_start, offset)
            self.held = None
        elif offset > writer.next_offset:
            _render_leading_gap(writer, offset, self.result.topic, self.result.partition)

    def _progress(self, first: int, last: int, records: int, nbytes: int) -> None:
        result = self.result
        result.records += records
        result.bytes += nbytes
        if result.first_offset is None:
            result.first_offset = first
        result.last_offset = last
        if self.options.progress_hook is not None:
            self.options.progress_hook(result.records)

    def by_records(self, start: int, stop: int) -> None:
        writer = self.writer
        topic, partition = self.result.topic, self.result.partition
        if self._consumer is None:
            self._consumer = reader(self.source)
        for chunk in iter_range(self._consumer, topic, partition, start, stop, idle_timeout_s=self.options.idle_timeout_s):
            for run in _contiguous_runs(chunk):
                self._next_visible(run[0].offset())
                held = self.held = run[-1]
                nbytes = writer.write_run(run[:-1]) + len(held.key() or b"") + len(held.value() or b"")
                self._progress(run[0].offset(), held.offset(), len(run), nbytes)
            writer.bulk.poll(0)
            writer.raise_if_failed()

    def by_batches(self, source: ClusterConfig, target: ClusterConfig, start: int, end: int) -> None:
        topic, partition = self.result.topic, self.result.partition
        position = start
        with wire.BrokerConnection(*wire.leader(source, topic, partition)) as fetcher, \
                wire.BrokerConnection(*wire.leader(target, topic, partition)) as sender:
            while position < end:
                error, source_high, blob = fetcher.fetch(topic, partition, position, self.options.fetch_max_bytes)
                if error:
                    raise CopyError(f"{topic}[{partition}]: fetching from the source at offset {position} failed: "
                                    f"{wire.error_name(error)}", topic=topic, partition=partition)
                batches = [b for b in wire.parse_batches(blob) if b.last_offset >= position]
                if len(batches) == 1 and batches[0].last_offset + 1 < end:
                    # one batch filled the fetch: peek at what follows it, to know whether it may go whole
                    _, _, more = fetcher.fetch(topic, partition, batches[0].last_offset + 1, 1)
                    batches += wire.parse_batches(more)[:1]
                if not batches:
                    # nothing readable yet (the stable offset holds back, or only markers follow):
                    # the record path waits for it, with its idle timeout
                    self.by_records(position, end)
                    return
                whole = 0
                while whole < len(batches) and _copy_whole(batches, whole, position, end, source_high):
                    whole += 1
                if whole:
                    self._send_batches(sender, batches[:whole])
                    position = batches[whole - 1].last_offset + 1
                else:
                    stop = next((b.base_offset for i, b in enumerate(batches)
                                 if i and _copy_whole(batches, i, position, end, source_high)),
                                batches[-1].last_offset + 1)
                    stop = min(stop, end)
                    self.by_records(position, stop)
                    position = stop

    def _send_batches(self, sender: wire.BrokerConnection, batches: list[wire.Batch]) -> None:
        writer = self.writer
        topic, partition = self.result.topic, self.result.partition
        self._next_visible(batches[0].base_offset)
        writer.flush_bulk()  # what librdkafka holds goes first: one writer at a time
        wire.produce_at(sender, topic, partition, ((b.for_produce(), b.base_offset) for b in batches),
                        "a copied record batch")
        writer.next_offset = batches[-1].last_offset + 1
        self.result.whole_batches += len(batches)
        self._progress(batches[0].base_offset, batches[-1].last_offset, sum(b.records for b in batches),
                       sum(len(b.data) for b in batches))

    def finish(self, end: int) -> None:
        """Write the held record and the gap after it up to `end`. When the held record is the
        last offset before `end`, what follows it on the source decides how: a lone transaction
        marker at `end` must be a commit marker after it (written now, so the target ends at
        `end + 1`); the next round could not put one there."""
        writer, held = self.writer, self.held
        if held is not None:
            tail = end - (held.offset() + 1)
            if tail == 0:
                topic, partition = self.result.topic, self.result.partition
                tail = 1 if invisible_run_at(self.source, self.source_admin, topic, partition, end) == 1 else 0
            if tail == 1:
                writer.commit_with_marker(held)
            else:
                writer.write_one(held)
                if tail >= 2:
                    writer.abort_fillers(held.offset() + 1, end)
            self.held = None
        elif writer.next_offset < end:
            _render_leading_gap(writer, end, self.result.topic, self.result.partition)


def _copy_whole(batches: list[wire.Batch], index: int, position: int, end: int, source_high: int) -> bool:
    """Whether batches[index] can be copied byte for byte: a plain batch (not transactional, not
    a marker, no record removed by compaction, no delete horizon, CreateTime) entirely inside [position, end), whose
    next offset is known to hold a visible record or is the source's end. (A gap of exactly 1
    after it would need its last record inside a transaction.)"""
    batch = batches[index]
    if (batch.base_offset < position or batch.last_offset >= end or batch.transactional or batch.control
            or not batch.dense or batch.log_append_time or batch.delete_horizon):
        return False
    if batch.last_offset + 1 == end:
        return source_high <= end  # else what follows `end` decides (the record path's `finish`)
    if index + 1 == len(batches):
        return False
    following = batches[index + 1]
    return (following.base_offset == batch.last_offset + 1 and not following.transactional
            and not following.control and following.dense)


def _contiguous_runs(chunk: list[Any]) -> list[list[Any]]:
    """Split a chunk into runs of consecutive offsets (one run, the common case, without a scan)."""
    first = chunk[0].offset()
    if chunk[-1].offset() - first == len(chunk) - 1:
        return [chunk]
    runs, start = [], 0
    previous = first
    for index in range(1, len(chunk)):
        current = chunk[index].offset()
        if current != previous + 1:
            runs.append(chunk[start:index])
            start = index
        previous = current
    runs.append(chunk[start:])
    return runs


def _render_leading_gap(writer: _Writer, until: int, topic: str, partition: int) -> None:
    """A gap that starts where this run starts, with no record of this run before it."""
    gap = until - writer.next_offset
    if gap == 1:
        # This copier never leaves a target there (`finish` and `_align` look ahead): the record
        # before it came from another writer, or from a copy made without that look-ahead.
        raise TargetDiverged(
            f"{topic}[{partition}]: source offset {writer.next_offset} is a lone transaction marker right after the "
            f"target's last record (offset {writer.next_offset - 1}), which was written outside a transaction; Kafka "
            "can put a marker there only in the transaction of that record, so the offsets cannot be preserved from "
            "here. Nothing was written. Copy this topic in translate mode (translate_topics), or to a target topic "
            "that does not exist yet", topic=topic, partition=partition)
    writer.abort_fillers(writer.next_offset, until)


def _align(source_low: int, target_low: int, target_high: int, topic: str, partition: int,
           target: ClusterConfig, target_admin: ClusterAdmin, writer: _Writer, lone_marker: bool) -> int:
    """Make the target's log start and end both equal the source's log start (DESIGN 4.2); returns
    the target's end. `lone_marker`: the source's log start is a lone transaction marker, so the
    last filler goes in a committed transaction whose marker takes that offset, and the target
    ends one past the log start, like the source's invisible offset."""
    if target_high > target_low:
        last = read_range(target, topic, partition, target_high - 1, target_high)
        if not last or not is_filler(last[-1]):
            raise ForeignTarget(
                f"{topic}[{partition}]: the target holds records below the source's log start {source_low} that "
                "this migration did not write (another copy or another producer); nothing was written. Migrate this "
                "topic to a target where it does not exist yet", topic=topic, partition=partition)
    plain_until = source_low - 1 if lone_marker else source_low
    if target_high < plain_until:
        count = plain_until - target_high
        if writer.options.fast_alignment and wire.plaintext(target):
            configs = writer.topic_configs
            fastfill.write_fillers(target, topic, partition, target_high, count,
                                   keyed="compact" in configs["cleanup.policy"],
                                   max_batch_bytes=int(configs["max.message.bytes"]))
            writer.fillers += count
        else:
            writer.next_offset = target_high
            writer.write_fillers(count)
            writer.flush_bulk()
        target_high = plain_until
    if lone_marker:
        writer.next_offset = target_high
        if target_high == source_low - 1:
            writer.commit_filler()
        elif target_high != source_low + 1:  # else an earlier attempt wrote them
            raise TargetDiverged(
                f"{topic}[{partition}]: the source's log start {source_low} is a lone transaction marker, but the "
                f"target already ends at {target_high} with fillers written outside a transaction (by another copy), "
                "so the marker cannot be put there. Nothing more was written. Migrate this topic to a target where "
                "it does not exist yet", topic=topic, partition=partition)
    if source_low > target_low:
        target_admin.delete_records(topic, partition, source_low)
    expected = (source_low, source_low + 1 if lone_marker else source_low)
    low, high = target_admin.watermarks(topic, partition)
    if (low, high) != expected:
        raise CopyError(f"{topic}[{partition}]: after alignment the target spans [{low}, {high}), expected "
                        f"[{expected[0]}, {expected[1]})", topic=topic, partition=partition)
    return high


def _trim_below(source_low: int, target_low: int, compared: int, topic: str, partition: int,
                target: ClusterConfig, target_admin: ClusterAdmin) -> None:
    """A resumed target whose log start is below the source's: the source's retention (or this
    copier's alignment, interrupted before DeleteRecords) left offsets there that the source no
    longer has. They are deleted when the target is known to be this copy: its records at the
    resume point matched the source's, or the offset below the log start is this copier's filler."""
    if not compared:
        below = read_range(target, topic, partition, max(target_low, source_low - 1), source_low)
        if not below or not is_filler(below[-1]):
            raise ForeignTarget(
                f"{topic}[{partition}]: the target holds offsets below the source's log start {source_low} that "
                "cannot be told apart from another writer's; nothing was written. Migrate this topic to a target "
                "where it does not exist yet", topic=topic, partition=partition)
    target_admin.delete_records(topic, partition, source_low)


def _check_resume_point(source: ClusterConfig, target: ClusterConfig, topic: str, partition: int,
                        low: int, target_high: int, options: CopyOptions) -> int:
    """The target's last records must be the source's records at the same offsets (DESIGN 4.3);
    returns how many were compared (0: no visible record in [low, target_high))."""
    window = options.resume_window
    while True:
        start = max(low, target_high - window)
        on_target = [_fingerprint(m) for m in read_range(target, topic, partition, start, target_high)]
        on_source = [_fingerprint(m) for m in read_range(source, topic, partition, start, target_high)]
        if on_target != on_source:
            first = next((i for i, (a, b) in enumerate(zip(on_target, on_source)) if a != b),
                         min(len(on_target), len(on_source)))
            at = (on_target[first][0] if first < len(on_target) else on_source[first][0]
                  if first < len(on_source) else target_high)
            raise TargetDiverged(
                f"{topic}[{partition}]: the target's records before its end {target_high} differ from the source's "
                f"(first difference at offset {at}), so it is not a copy of this partition: another producer wrote "
                "to it, or it holds another source's data. Nothing was written. Stop whatever writes to the target "
                "topic; if it is not in use, migrate this topic to a target where it does not exist yet",
                topic=topic, partition=partition)
        if on_target or start == low:
            return len(on_target)
        window *= 8


def _fingerprint(msg: Any) -> tuple[int, str]:
    digest = ContentDigest()
    digest.update_message(msg)
    return msg.offset(), digest.hexdigest()


def verify_into(source: ClusterConfig, target: ClusterConfig, result: PartitionResult, start: int) -> None:
    """Digest both sides over [start, end) and store them in `result`."""
    started = time.monotonic()
    end = max(result.end_offset, result.target_end)
    result.source_digest = partition_digest(source, result.topic, result.partition, start, end).hexdigest()
    result.target_digest = partition_digest(target, result.topic, result.partition, start, end).hexdigest()
    result.digests_equal = result.source_digest == result.target_digest
    result.verify_seconds = time.monotonic() - started


def _copy_translate(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, options: CopyOptions,
                    source_low: int, target_admin: ClusterAdmin, resume_map: Sequence[OffsetRun]) -> PartitionResult:
    """Visible records appended densely after whatever the target holds; an exact offset map is kept."""
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    _, target_high = target_admin.watermarks(topic, partition)
    result = PartitionResult(topic, partition, TRANSLATE, source_low, end, target_high, target_high)
    runs = [dataclasses.replace(run) for run in resume_map]
    start = source_low
    if runs:
        mapped_end = runs[-1].target_start + runs[-1].length
        if target_high != mapped_end:
            raise TargetDiverged(
                f"{topic}[{partition}]: the target ends at {target_high}, but the offset map of the earlier runs "
                f"ends at {mapped_end}: another producer wrote to the target topic, or an earlier copy stopped "
                "before recording its map. Nothing was written. Stop other producers to the target topic and re-run; "
                "if the topic is in use on the target, leave it out of the run",
                topic=topic, partition=partition)
        start = max(source_low, runs[-1].source_start + runs[-1].length)
    writer = _Writer(target, topic, partition, target_admin, options, transactional=False)
    writer.next_offset = target_high
    started = time.monotonic()
    consumer = reader(source)
    try:
        for chunk in iter_range(consumer, topic, partition, start, end, idle_timeout_s=options.idle_timeout_s):
            for run in _contiguous_runs(chunk):
                offset = run[0].offset()
                if runs and offset == runs[-1].source_start + runs[-1].length:
                    runs[-1].length += len(run)
                else:
                    runs.append(OffsetRun(offset, writer.next_offset, len(run)))
                result.bytes += writer.write_run(run)
                result.records += len(run)
            writer.bulk.poll(0)
            writer.raise_if_failed()
            if options.progress_hook is not None:
                options.progress_hook(result.records)
        writer.flush_bulk()
    finally:
        consumer.close()
        writer.close()
    result.copy_seconds = time.monotonic() - started
    _, result.target_end = target_admin.watermarks(topic, partition)
    if result.target_end != writer.next_offset:
        raise OffsetMismatch(topic, partition, writer.next_offset, result.target_end)
    result.offset_map = runs
    if result.records:
        result.first_offset, result.last_offset = runs[0].source_start, runs[-1].source_start + runs[-1].length - 1
    return result


def translate_offset(runs: list[OffsetRun], offset: int, target_end: int) -> int:
    """The target offset of the first record at or after source `offset` (`target_end` past the last run)."""
    for run in runs:
        if offset < run.source_start:
            return run.target_start
        if offset < run.source_start + run.length:
            return run.target_start + (offset - run.source_start)
    return target_end
