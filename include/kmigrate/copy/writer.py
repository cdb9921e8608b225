"""Writes records to one target partition at expected offsets (docs/DESIGN.md §4.1), and renders
gaps with transaction markers (§4.4). The copy's options are `kmigrate.copy.options`'s."""
from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from kmigrate.config import ClusterConfig
from kmigrate.copy.options import CopyOptions
from kmigrate.errors import CopyError, CopyInterrupted, MissingAcls, OffsetMismatch
from kmigrate.kafka import transport, txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import FILLER_HEADER, FILLER_KEY, timestamp_of

FILLER_HEADERS = [(FILLER_HEADER, b"1")]
# a record of message format v0 has no timestamp (a consumer sees -1): written so (as "no timestamp")
NO_TIMESTAMP = -1

# librdkafka's errors that pass: a leader moving, a broker restarting, the ISR shrinking for a
# while, a message not delivered in time while that lasted (the copy resumes from the target's end);
# so is a request cut off when librdkafka drops a broker's handle (with every broker down it
# bootstraps again and forgets the brokers it had learned: a whole cluster restarted).
TRANSIENT = frozenset({
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT,
    KafkaError._TIMED_OUT_QUEUE, KafkaError.REQUEST_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, KafkaError.UNKNOWN_PRODUCER_ID, KafkaError.NETWORK_EXCEPTION,
    KafkaError.CONCURRENT_TRANSACTIONS, KafkaError._DESTROY_BROKER,
})


def transient(err: KafkaError) -> bool:
    return err.code() in TRANSIENT or (err.retriable() and not err.fatal())


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


def marker_transactional_id(run_id: str, topic: str, partition: int) -> str:
    """The transactional id of the partition's markers alone (the producer's own id stays with it)."""
    return transactional_id(run_id, topic, partition) + "-marker"


class Writer:
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
        known = (options.target_configs or {}).get(topic)  # the target topic's, read once per copy or task
        self.topic_configs = dict(known) if known is not None else admin.topic_configs(topic)
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
        # connection (most times here) the next comes 500 ms later. A copy on the record path finds it
        # ready; one that is not pays about 2 ms of CPU for it (`eager_producer` off: on first use).
        self._bulk = target.client(Producer, target.producer(**self._bulk_config)) if options.eager_producer else None
        self._bulk_used = False
        self._txn_config = {
            **common,
            "transactional.id": transactional_id(options.run_id, topic, partition),
            "transaction.timeout.ms": 60_000,
            "linger.ms": 0,
        } if transactional else None
        self.target = target
        self._txn: Producer | None = None
        self._txn_open = False  # between begin_transaction and its commit or abort

    @functools.cached_property
    def raw(self) -> bool:
        """Whether the copier's raw connection reaches the target (fences, markers alone, whole
        batches), decided once a copy: the check builds the connection's TLS context."""
        return transport.raw_capable(self.target)

    @property
    def checked_each_write(self) -> bool:
        """Whether this copy wrote only whole batches (each checked by its Produce response's offset)."""
        return not self._bulk_used and self._txn is None and self.markers == self.fillers == 0

    @property
    def bulk(self) -> Producer:
        """The idempotent producer for records copied one by one."""
        self._bulk_used = True
        if self._bulk is None:
            self._bulk = self.target.client(Producer, self.target.producer(**self._bulk_config))
        return self._bulk

    @property
    def txn(self) -> Producer:
        """The transactional producer, created on first use. `init_transactions` fences an earlier
        copier of this partition and aborts its open transaction (adding its abort marker)."""
        if self._txn is None:
            assert self._txn_config is not None, "translate mode writes no transaction markers"
            producer = self._connected(self.target.client(Producer, self.target.producer(**self._txn_config)))
            try:
                with self._transaction("starting the transactional producer"):
                    producer.init_transactions(30)
            except KafkaException as exc:  # the producer is left to the collector (see close)
                if exc.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    raise MissingAcls.transactional_id(self._txn_config["transactional.id"], self.topic,
                                                       self.partition) from exc
                raise
            self._txn = producer
        return self._txn

    def _connected(self, producer: Producer) -> Producer:
        """`producer` once a broker it learned from metadata (not the bootstrap address) answered: a
        transactional producer looking for its coordinator before that retries 500 ms later."""
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
            raise (CopyInterrupted if transient(err) else CopyError)(
                f"{self.topic}[{self.partition}]: writing to the target failed: {err.str()}",
                topic=self.topic, partition=self.partition)

    # ---------------------------------------------------------------- bulk path

    def _produce(self, producer: Producer, key: bytes | None, value: bytes | None,
                 headers: Any, timestamp: int, check: bool) -> None:
        kwargs: dict[str, Any] = {"partition": self.partition, "key": key, "value": value, "headers": headers}
        if timestamp > 0 or timestamp == NO_TIMESTAMP:
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
        self.options.may_write()
        self._produce(self.bulk, msg.key(), msg.value(), msg.headers(), timestamp_of(msg), True)

    def write_run(self, msgs: list[Any]) -> int:
        """Bulk-write records that take consecutive offsets from `next_offset`; returns their key +
        value bytes. The hot loop of the copy: the first and last delivery of each slice of
        `check_every` records are checked, the rest carry no callback."""
        self.options.may_write()
        produce, topic, partition = self.bulk.produce, self.topic, self.partition
        check_every = self.options.check_every
        count, nbytes, i = len(msgs), 0, 0
        while i < count:
            try:
                while i < count:
                    msg = msgs[i]
                    key, value, timestamp = msg.key(), msg.value(), timestamp_of(msg)
                    if i % check_every == 0 or i == count - 1:
                        produce(topic, value, key, partition=partition, headers=msg.headers(),
                                timestamp=timestamp if timestamp > 0 or timestamp == NO_TIMESTAMP else 0,
                                on_delivery=self._checker(self.next_offset + i))
                    else:
                        produce(topic, value, key, partition=partition, headers=msg.headers(),
                                timestamp=timestamp if timestamp > 0 or timestamp == NO_TIMESTAMP else 0)
                    nbytes += (len(key) if key else 0) + (len(value) if value else 0)
                    i += 1
            except BufferError:
                self.bulk.poll(0.05)
        self.next_offset += count
        return nbytes

    def write_fillers(self, count: int) -> None:
        """Non-transactional fillers (alignment); every 'check_every'th and the last are checked."""
        self.options.may_write()
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

    # ---------------------------------------------------------------- gaps (docs/DESIGN.md §4.4)

    def commit_with_marker(self, msg: Any) -> None:
        """Write `msg`, visible, and a commit marker at the next offset (a gap of 1 after it).

        Over the raw connection the record goes with the other visible records and the marker alone
        after it (a transaction that registers the partition and writes nothing). A copy cut off
        between the two (its term ended, its process killed) leaves the record visible: the next copy
        renders the gap of 1 after it as an abort marker alone, invisible as the source's commit
        marker is. Only the librdkafka path puts the record inside the transaction, and a transaction
        cut off there is aborted by the next copy's fence, its record hidden for good where the
        source shows it (docs/DESIGN.md §4.4): that path commits once its record is in the log."""
        if self.raw:
            self.write_one(msg)
            self.flush_bulk()
            self.options.reached("commit-record-written")
            self.lone_marker(commit=True)
            return
        self._commit_one(msg.key(), msg.value(), msg.headers(), timestamp_of(msg))

    def commit_filler(self) -> None:
        """One filler in a committed transaction: the filler and its commit marker take two offsets
        (alignment below a log start that sits on a transaction marker)."""
        self._commit_one(FILLER_KEY, None, FILLER_HEADERS, 0)
        self.fillers += 1

    def _commit_one(self, key: bytes | None, value: bytes | None, headers: Any, timestamp: int) -> None:
        self.flush_bulk()
        self.options.may_write()
        with self._transaction("committing a transaction"):
            self.txn.begin_transaction()
            self._txn_open = True
            self._produce(self.txn, key, value, headers, timestamp, True)
            self.txn.flush(30)
            self.raise_if_failed()
            # no guard from here: the record is in the log, and only the commit keeps it visible (a
            # newer copier of the partition fences this transactional id first, failing the commit)
            self.options.reached("commit-record-written")
            self.txn.commit_transaction(30)
            self._txn_open = False
        self._after_marker()

    @contextlib.contextmanager
    def _transaction(self, what: str) -> Iterator[None]:
        """A transactional step; a transient broker error in it is CopyInterrupted (the copy's
        next attempt fences this producer and aborts what it left open)."""
        try:
            yield
        except KafkaException as exc:
            err = exc.args[0]
            if transient(err) or err.txn_requires_abort():
                raise CopyInterrupted(f"{self.topic}[{self.partition}]: {what} on the target failed: {err.str()}",
                                      topic=self.topic, partition=self.partition) from exc
            raise

    def abort_fillers(self, start: int, end: int) -> None:
        """Render the gap [start, end), end - start >= 2: end-start-1 aborted fillers and the abort marker."""
        assert end - start >= 2 and start == self.next_offset
        self.flush_bulk()
        self.options.may_write()
        count = end - start - 1
        with self._transaction("aborting a transaction of fillers"):
            self.txn.begin_transaction()
            self._txn_open = True
            for i in range(count):  # sparse delivery checks, as for bulk writes (the producer is idempotent)
                self._produce(self.txn, FILLER_KEY, None, FILLER_HEADERS, 0,
                              i % self.options.check_every == 0 or i == count - 1)
            # librdkafka purges unsent messages on abort: make sure the fillers are written first
            self.txn.flush(30)
            self.raise_if_failed()
            self.options.reached("gap-transaction-open")
            self.options.may_write()  # the marker takes an offset too
            self.txn.abort_transaction(30)
            self._txn_open = False
        self.fillers += count
        self._after_marker()

    def lone_marker(self, commit: bool) -> None:
        """A marker alone at `next_offset`, from a transaction that registers the partition and writes
        nothing (`txn_wire`), under the partition's marker transactional id (`marker_transactional_id`)."""
        self.flush_bulk()
        self.options.may_write()
        txn_wire.lone_marker(self.target, self.topic, self.partition,
                             marker_transactional_id(self.options.run_id, self.topic, self.partition), commit)
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

    def abandon(self) -> None:
        """After a failed attempt: drop what the producers still hold (the next attempt resumes from
        the target's end and writes it again), so that no record of this attempt is sent later
        behind the next one's, and close them; a transactional producer inside a transaction is left
        to the collector (closing it could wait for a broker; the next attempt fences it)."""
        for producer in (self._bulk, self._txn):
            if producer is None:
                continue
            producer.purge(in_queue=True, in_flight=True, blocking=False)
            deadline = time.monotonic() + 2.0
            while len(producer) and time.monotonic() < deadline:  # the purged records' reports
                producer.poll(0.05)
        self._bulk_used = False
        self.close()

    def close(self) -> None:
        """Flush, then close each producer that holds nothing more, so that its threads and
        connections end with the copy. Each producer's error callback refers back to this writer:
        without close() they live until the garbage collector finds the cycle, which in a process
        copying partition after partition may be many partitions later. A producer still holding
        records or an open transaction (a copy that failed) is left to the collector, as close()
        would wait for a broker that may not answer (measured: it hangs on a queued record)."""
        if self._bulk is not None:
            if self._bulk_used:
                self._bulk.flush(30)
            if len(self._bulk) == 0:
                self._bulk.close()
        if self._txn is not None:
            self._txn.flush(30)
            if len(self._txn) == 0 and not self._txn_open:
                self._txn.close()


def contiguous_runs(chunk: list[Any]) -> list[list[Any]]:
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
