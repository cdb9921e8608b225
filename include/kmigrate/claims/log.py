"""The claims log of a cluster (`ClaimLog`): the claims topic read and written by this process, one
reader and writer a cluster, shared (`claim_log`). A record is appended and the log read up to it
to learn whether it took effect (`submit`); the log is kept short by snapshots and the deletion of
the records below them. What the records mean and how the log is kept short: `kmigrate.claims`."""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kmigrate.claims.state import Claims
from kmigrate.config import ClusterConfig
from kmigrate.errors import ClusterUnavailable, KmigrateError
from kmigrate.kafka.pool import identity, shared_admin

log = logging.getLogger(__name__)

CLAIMS_TOPIC = "kmigrate-claims"
SNAPSHOT_AFTER = 10_000  # records folded since the last snapshot (or the log's start) before a reader writes the next
# a snapshot's records: under the producer's message.max.bytes (1,000,000) and the topic's 1 MB
SNAPSHOT_CHUNK_BYTES = 800_000
SNAPSHOT_MAX_CHUNKS = 1_000  # a larger state (some millions of leases) is not snapshotted this time
CLAIMS_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                  "message.timestamp.type": "LogAppendTime"}


def _claim_of(value: bytes | None) -> dict[str, Any] | None:
    """The claim a record's value holds: a JSON object; None for anything else (no value, not JSON,
    JSON of another shape), which every reader skips alike."""
    if value is None:
        return None
    try:
        record = json.loads(value)
    except Exception:  # noqa: BLE001 (not JSON, not UTF-8, nested past the recursion limit: no claim, for anyone)
        return None
    return record if isinstance(record, dict) else None


def _what(value: bytes | None) -> str:
    if value is None:
        return "no value: a tombstone"
    return f"{len(value)} bytes: {value[:40]!r}" + ("..." if len(value) > 40 else "")


class ClaimLog:
    """The claims topic of one cluster, read and written by this process (one per cluster, shared)."""

    def __init__(self, cluster: ClusterConfig, timeout_s: float = 30.0) -> None:
        self.cluster, self.timeout_s = cluster, timeout_s
        self.state = Claims()
        self._lock = threading.Lock()
        self._next = 0  # the next offset to fold
        # where the count to the next snapshot began: the log's first record, or the last snapshot's last chunk
        self._base = 0
        self._snapshots: list[int] = []  # the first chunks' offsets of the last two snapshots in effect, as folded here
        self._trims = True  # False once DeleteRecords was refused here (the principal lacks Delete on the topic)
        self._retry_at = 0  # after a snapshot that did not take effect, the next is tried from this offset
        self._producer: Producer | None = None
        self._consumer: Consumer | None = None

    def _open(self, create: bool) -> bool:
        if self._consumer is not None:
            return True
        with shared_admin(self.cluster) as admin:
            if CLAIMS_TOPIC not in admin.list_topics():
                if not create:
                    return False
                replicas = min(3, len(admin.client.list_topics(timeout=admin.timeout_s).brokers))
                admin.create_topic(CLAIMS_TOPIC, 1, {**CLAIMS_CONFIGS, "min.insync.replicas": str(min(2, replicas))},
                                   replicas=replicas)
        self._producer = Producer(self.cluster.producer(**{"acks": "all", "enable.idempotence": True,
                                                            "linger.ms": 0, "compression.type": "lz4"}))
        consumer = Consumer(self.cluster.consumer("kmigrate-claims-reader", **{"enable.partition.eof": False}))
        # at an offset, not OFFSET_BEGINNING: librdkafka's look-up of the beginning costs 0.5 s here. A first
        # read starts at the log start (a snapshot's, once trimmed); a reader whose next offset a trim
        # deleted meanwhile is reset to it (auto.offset.reset), as after records deleted by hand
        if self._next == 0:
            try:
                self._next = self._base = consumer.get_watermark_offsets(TopicPartition(CLAIMS_TOPIC, 0),
                                                                         timeout=self.timeout_s)[0]
            except KafkaException:  # a topic just created, not known everywhere yet: from 0
                pass
        consumer.assign([TopicPartition(CLAIMS_TOPIC, 0, self._next)])
        self._consumer = consumer
        return True

    def _append(self, records: list[dict[str, Any]]) -> list[int]:
        """Append `records` (one flush for all); their offsets, in order."""
        delivered: dict[int, Any] = {}
        for i, record in enumerate(records):
            self._producer.produce(CLAIMS_TOPIC, key=record.get("scope", record.get("run", "")).encode(),
                                   value=json.dumps(record, sort_keys=True).encode(), partition=0,
                                   on_delivery=lambda err, msg, i=i: delivered.__setitem__(i, (err, msg)))
        self._producer.flush(self.timeout_s)
        failed = next((delivered.get(i, (None, None))[0] for i in range(len(records))
                       if i not in delivered or delivered[i][0] is not None), False)
        if failed is not False:
            why = failed.str() if failed is not None else f"no answer in {self.timeout_s:.0f} s"
            raise ClusterUnavailable(f"{self.cluster.name}: could not write to {CLAIMS_TOPIC} ({why}); the run's "
                                     "claims are kept there. Check the target cluster, then retry the step")
        return [delivered[i][1].offset() for i in range(len(records))]

    def _fold_through(self, offset: int) -> dict[int, bool]:
        """Fold records up to and including `offset`; the outcome of each one folded now, by offset."""
        outcomes: dict[int, bool] = {}
        deadline = time.monotonic() + self.timeout_s
        while self._next <= offset:
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"{self.cluster.name}: {CLAIMS_TOPIC} could not be read up to offset "
                                         f"{offset} in {self.timeout_s:.0f} s; check the target cluster and retry")
            msg = self._consumer.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == KafkaError._PARTITION_EOF):
                continue
            if msg.error():
                raise ClusterUnavailable(f"{self.cluster.name}: reading {CLAIMS_TOPIC} failed: {msg.error().str()}")
            if msg.offset() == 0:
                self.state.born = msg.timestamp()[1]
            record = _claim_of(msg.value())
            if record is None:  # not a claim (a tombstone, another producer's record): changes nothing
                log.warning("%s: record at offset %d of %s is not a claim (%s); skipped", self.cluster.name,
                            msg.offset(), CLAIMS_TOPIC, _what(msg.value()))
                outcomes[msg.offset()] = False
            else:
                outcomes[msg.offset()] = self.state.apply(msg.timestamp()[1], record, msg.offset())
                if self.state.unreadable is not None:
                    log.warning("%s: record at offset %d of %s is not a claim this version reads (%s); skipped",
                                self.cluster.name, msg.offset(), CLAIMS_TOPIC, self.state.unreadable)
                elif outcomes[msg.offset()] and record.get("kind") == "snapshot":  # its last chunk: in effect
                    # the next snapshot counts from here; a trim deletes below the first chunk, its `through`
                    self._base, self._snapshots = msg.offset(), [*self._snapshots[-1:], record["through"]]
            self._next = msg.offset() + 1
        return outcomes

    def _trim(self) -> None:
        """Once SNAPSHOT_AFTER records lie between the fold's start (or last snapshot) and its end: the
        state as a snapshot, and, when it took effect (nothing landed before it), the records below the
        snapshot before it deleted. Best effort: a log not trimmed is only longer to read."""
        if not self._trims or self._next - self._base < SNAPSHOT_AFTER or self._next < self._retry_at:
            return
        try:
            self._snapshot_and_trim()
        except KmigrateError as exc:  # the next reader past the mark tries again
            log.warning("%s: %s not trimmed this time (%s)", self.cluster.name, CLAIMS_TOPIC, exc)

    def _snapshot_and_trim(self) -> None:
        through = self._next
        chunks = self.state.snapshot_chunks(through, SNAPSHOT_CHUNK_BYTES)
        if len(chunks) > SNAPSHOT_MAX_CHUNKS:
            self._retry_at = self._next + SNAPSHOT_AFTER
            log.warning("%s: the claims' state takes %d records of %d bytes, over %d; %s is not trimmed this time",
                        self.cluster.name, len(chunks), SNAPSHOT_CHUNK_BYTES, SNAPSHOT_MAX_CHUNKS, CLAIMS_TOPIC)
            return
        offsets = self._append(chunks)
        outcomes = self._fold_through(offsets[-1])
        if offsets != list(range(through, through + len(chunks))) or not outcomes.get(offsets[-1]):
            # another record came first or between: not in effect; tried again some records later
            self._retry_at = self._next + SNAPSHOT_AFTER // 20
            return
        if len(self._snapshots) < 2:  # the first this reader knows of: nothing below a snapshot to delete yet
            return
        below = self._snapshots[0]  # the first chunk of the snapshot before this one
        try:
            with shared_admin(self.cluster) as admin:
                admin.delete_records(CLAIMS_TOPIC, 0, below)
            log.info("%s: %s trimmed below its snapshot at offset %d", self.cluster.name, CLAIMS_TOPIC, below)
        except KmigrateError as exc:  # the snapshots stand; the next one trims
            self._trims = "AUTHORIZATION" not in str(exc).upper()
            log.warning("%s: %s not trimmed below offset %d (%s)", self.cluster.name, CLAIMS_TOPIC, below, exc)

    def _restart_if_behind(self, end: int) -> None:
        """The log ends below what was read: the topic was deleted and created again (or the cluster
        behind the address replaced). What was read belonged to the old one: read the new one anew."""
        if end < self._next:
            log.warning("%s: %s ends at %d, below the %d records read before: it was created again; reading "
                        "it from the start", self.cluster.name, CLAIMS_TOPIC, end, self._next)
            self._consumer.close()
            self._producer = self._consumer = None
            self.state, self._next, self._base, self._snapshots = Claims(), 0, 0, []
            self._open(create=True)

    def submit(self, record: dict[str, Any]) -> bool:
        """Append `record` and read the log up to it: True when it took effect."""
        return self.submit_all([record])[0]

    def submit_all(self, records: list[dict[str, Any]]) -> list[bool]:
        """Append `records` together and read the log up to the last: whether each took effect."""
        if not records:
            return []
        with self._lock:
            self._open(create=True)
            offsets = self._append(records)
            self._restart_if_behind(max(offsets) + 1)
            outcomes = self._fold_through(max(offsets))
            # a record of ours that a snapshot took in before this reader got to it: the state tells its outcome
            taken = [outcomes[offset] if offset in outcomes else self.state.holds(record)
                     for offset, record in zip(offsets, records, strict=True)]
            self._trim()
            return taken

    def close(self) -> None:
        """Close its clients (opened again when next used; what was read is kept)."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
            self._producer = self._consumer = None

    def current(self) -> Claims:
        """The claims as of now (read only: no topic is created; none means nothing is held)."""
        with self._lock:
            if self._open(create=False):
                _, high = self._consumer.get_watermark_offsets(TopicPartition(CLAIMS_TOPIC, 0),
                                                                timeout=self.timeout_s)
                self._restart_if_behind(high)
                if high > self._next:
                    self._fold_through(high - 1)
                    self._trim()
            return self.state


_logs: dict[tuple, ClaimLog] = {}
_logs_lock = threading.Lock()


def claim_log(cluster: ClusterConfig) -> ClaimLog:
    with _logs_lock:
        return _logs.setdefault(identity(cluster), ClaimLog(cluster))


def close_all() -> None:
    """Close this process's claim log clients (like kmigrate.kafka.pool's close_all)."""
    with _logs_lock:
        logs = list(_logs.values())
    for claims_log in logs:
        claims_log.close()


def received_from(cluster: ClusterConfig) -> dict[str, dict[str, Any]]:
    """The source clusters that ever claimed runs on `cluster`'s claims log: cluster id -> {"run": the
    first run that claimed with it, "ts": the broker time of that claim}. Read only: an absent
    claims topic is not created (and means none), and nothing is written: a reader of its own that
    writes no snapshot and trims nothing, since `cluster` may be a run's source, which no step writes."""
    reader = ClaimLog(cluster)
    reader._trims = False
    try:
        return {source: dict(entry) for source, entry in reader.current().sources.items()}
    finally:
        reader.close()
