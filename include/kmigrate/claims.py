"""Claims kept on the target cluster: which run holds which topics, and which copier writes which
partition (docs/DESIGN.md §4.7).

The claims are records of one single-partition topic on the target, `kmigrate-claims`, stamped by
the broker (LogAppendTime). Every claim is appended first and decided after: each reader folds the
same records in the same log order with the same rule (`Claims.apply`), so all agree on which claim
took effect, with no coordinator and no clock but the partition leader's.

- A run claims its topics before its first write. The claim takes effect unless another run holds
  one of them; it stays through failures and retries, and is released when the run ends (the
  report) or by hand (`python -m kmigrate.claims release RUN`).
- A copier leases the partition it writes (`kmigrate.leases`). A lease takes effect when the partition is free, its
  lease ran out (no renewal for `lease_s` by the broker's clock), or its holder's process is gone
  (seen by a claimant on the same host). The holder renews it every `lease_s / 5` and stops writing
  when no renewal has been confirmed for `lease_s / 2`, well before anyone may take it over.
- The log is kept short: a reader that has folded SNAPSHOT_AFTER records since the last snapshot
  (or the log's start) appends the state it folded as a snapshot, which takes effect only where
  nothing landed between its fold and it (its `through` is its own offset), and then deletes the
  records below the snapshot before it. A process that starts later reads at most twice
  SNAPSHOT_AFTER records, from a snapshot on, not the whole history (a mirror's renewals alone add
  one record a partition every 6 s); the last SNAPSHOT_AFTER records stay readable as they were."""
from __future__ import annotations

import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Collection
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from kmigrate.config import ClusterConfig
from kmigrate.errors import ClusterUnavailable, KmigrateError, TopicsHeld
from kmigrate.kafka.pool import identity, shared_admin

log = logging.getLogger(__name__)

CLAIMS_TOPIC = "kmigrate-claims"
SNAPSHOT_AFTER = 10_000  # records folded since the last snapshot (or the log's start) before a reader writes the next
SNAPSHOT_MAX_BYTES = 900_000  # a larger state is not snapshotted (the topic's records are at most 1 MB)
CLAIMS_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
                  "message.timestamp.type": "LogAppendTime"}


class Claims:
    """The state the claims log describes, folded record by record in log order."""

    def __init__(self) -> None:
        self.runs: dict[str, dict[str, Any]] = {}   # run -> its claim (topics, dag, host, ts)
        self.parts: dict[str, dict[str, Any]] = {}  # "topic:partition" -> the lease (holder, ts, lease_ms)
        # broker time of the log's first record (offset 0), once read: a log younger than a lease grants
        # a lease only on a target partition its claimant found empty, or one already leased in this
        # log, so that a copier holding a lease in a claims topic deleted since has stopped writing
        self.born: int | None = None
        self.leased: set[str] = set()  # scopes a lease took effect on in this log

    def conflicts(self, run: str, topics: Collection[str]) -> dict[str, list[str]]:
        """The other runs holding any of `topics`, with those topics."""
        wanted = set(topics)
        return {other: sorted(wanted & set(claim["topics"])) for other, claim in self.runs.items()
                if other != run and wanted & set(claim["topics"])}

    def apply(self, ts_ms: int, record: Any, offset: int = -1) -> bool:
        """Fold one record (broker timestamp `ts_ms`); True when it took effect. A record this rule
        cannot read (another version's, or not ours) changes nothing, for every reader alike."""
        try:
            return self._apply(ts_ms, record, offset)
        except (AttributeError, KeyError, TypeError, ValueError):
            return False

    def snapshot(self, through: int) -> dict[str, Any]:
        """This state as a record, to take effect at offset `through` (the next one this state has not folded)."""
        return {"kind": "snapshot", "through": through, "runs": self.runs, "parts": self.parts, "born": self.born,
                "leased": sorted(self.leased)}

    def holds(self, record: dict[str, Any]) -> bool:
        """Whether the state is what `record` asked for: its outcome, for a record of this reader's that a
        snapshot folded in before the reader read it (the log was trimmed past it meanwhile)."""
        kind, holder = record.get("kind"), self.parts.get(record.get("scope", ""), {}).get("holder")
        if kind == "run":
            return set(record["topics"]) <= set(self.runs.get(record["run"], {}).get("topics", ()))
        if kind == "run-release":
            return record["run"] not in self.runs
        return (holder == record.get("holder")) == (kind == "lease")

    def _apply(self, ts_ms: int, record: dict[str, Any], offset: int) -> bool:
        kind = record.get("kind")
        if kind == "snapshot":  # in effect only at the offset it was taken for: nothing landed in between
            if record["through"] != offset or not isinstance(record["runs"], dict) or not isinstance(record["parts"], dict):
                return False
            self.runs, self.parts, self.born = dict(record["runs"]), dict(record["parts"]), record["born"]
            self.leased = set(record["leased"])
            return True
        if kind == "run":
            if (not isinstance(record["run"], str) or not isinstance(record["topics"], list)
                    or self.conflicts(record["run"], record["topics"])):
                return False
            held = self.runs.get(record["run"], {"topics": []})
            self.runs[record["run"]] = {**record, "topics": sorted(set(held["topics"]) | set(record["topics"])),
                                        "ts": ts_ms}
            return True
        if kind == "run-release":
            return self.runs.pop(record["run"], None) is not None
        if kind == "lease":
            if not isinstance(record["holder"], str):
                return False  # every reader of the lease compares holders
            held = self.parts.get(record["scope"])
            lease_ms = int(record["lease_ms"])  # stored as a number: a later record is compared with it
            if (self.born is not None and ts_ms - self.born < lease_ms and record.get("target_empty") is not True
                    and record["scope"] not in self.leased):
                return False  # the claims topic is new (or was deleted and created again): see `born`
            if (held and held["holder"] != record["holder"] and ts_ms - held["ts"] <= held["lease_ms"]
                    and record.get("breaks") != held["holder"]):
                return False
            self.parts[record["scope"]] = {**record, "lease_ms": lease_ms, "ts": ts_ms}
            self.leased.add(record["scope"])
            return True
        if kind == "lease-release":
            held = self.parts.get(record["scope"])
            if held and held["holder"] == record["holder"]:
                del self.parts[record["scope"]]
                return True
            return False
        return False  # a kind this version does not know changes nothing


def _claim_of(value: bytes | None) -> dict[str, Any] | None:
    """The claim a record's value holds: a JSON object; None for anything else (no value, not JSON,
    JSON of another shape), which every reader skips alike."""
    if value is None:
        return None
    try:
        record = json.loads(value)
    except ValueError:  # not JSON, or not UTF-8
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
        self._base = 0  # where the fold began: the log's first record, or the last snapshot that took effect
        self._snapshots: list[int] = []  # the offsets of the last two snapshots that took effect, as folded here
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
                if outcomes[msg.offset()] and record.get("kind") == "snapshot":
                    self._base, self._snapshots = msg.offset(), [*self._snapshots[-1:], msg.offset()]
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
        snapshot = self.state.snapshot(through)
        if len(json.dumps(snapshot)) > SNAPSHOT_MAX_BYTES:
            self._trims = False
            log.warning("%s: the claims' state is over %d bytes; %s is not trimmed", self.cluster.name,
                        SNAPSHOT_MAX_BYTES, CLAIMS_TOPIC)
            return
        [offset] = self._append([snapshot])
        self._fold_through(offset)
        if offset != through:  # another claim came first: not in effect; tried again some records later
            self._retry_at = self._next + SNAPSHOT_AFTER // 20
            return
        if len(self._snapshots) < 2:  # the first this reader knows of: nothing below a snapshot to delete yet
            return
        below = self._snapshots[0]
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


def _held_error(run: str, conflicts: dict[str, list[str]], claims: Claims) -> TopicsHeld:
    holders = "; ".join(
        f"run {other!r}" + (f" of DAG {claims.runs[other].get('dag')!r}" if claims.runs[other].get("dag") else "")
        + f" (claimed {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(claims.runs[other]['ts'] / 1000))}"
        + f" on {claims.runs[other].get('host')}) holds {', '.join(topics)}"
        for other, topics in sorted(conflicts.items()))
    first = sorted(conflicts)[0]
    return TopicsHeld(f"run {run!r} is refused before writing anything: {holders}. Let that run finish (its report "
                      "releases its topics) or, if it was abandoned, release them with `python -m "
                      f"kmigrate.claims release {first} --bootstrap-servers <target>`, then retry",
                      holders=sorted(conflicts))


def check_topics_free(target: ClusterConfig, run: str, topics: Collection[str]) -> None:
    """Read only (a dry run, the preflight): TopicsHeld when another run holds one of `topics`."""
    claims = claim_log(target).current()
    conflicts = claims.conflicts(run, topics)
    if conflicts:
        raise _held_error(run, conflicts, claims)


def claim_topics(target: ClusterConfig, run: str, topics: Collection[str], dag: str | None = None) -> None:
    """The run's claim on `topics` (again: no change); TopicsHeld, naming the holders, when another
    run holds one of them."""
    claims_log = claim_log(target)
    record = {"kind": "run", "run": run, "topics": sorted(topics), "dag": dag, "host": socket.gethostname()}
    if not claims_log.submit(record):
        raise _held_error(run, claims_log.state.conflicts(run, topics), claims_log.state)
    log.info("%s: run %s holds %d topics", target.name, run, len(topics))


def release_topics(target: ClusterConfig, run: str) -> bool:
    """Release the run's topics; False when it held none."""
    return claim_log(target).submit({"kind": "run-release", "run": run})


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kmigrate.claims",
                                     description="Show or release the runs' claims on a target cluster.")
    parser.add_argument("action", choices=("show", "release"))
    parser.add_argument("run", nargs="?", help="the run whose topics are released")
    parser.add_argument("--bootstrap-servers", required=True, help="the target cluster")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="a client setting (security.protocol, sasl.*, ssl.*), repeatable")
    args = parser.parse_args(argv)
    settings = dict(item.split("=", 1) for item in args.config)
    target = ClusterConfig.from_bootstrap("target", args.bootstrap_servers, **settings)
    if args.action == "show":
        claims = claim_log(target).current()
        print(json.dumps({"runs": claims.runs, "leases": claims.parts}, indent=1, sort_keys=True))
        return 0
    if not args.run:
        parser.error("release needs the run's name")
    released = release_topics(target, args.run)
    print(f"run {args.run!r}: " + ("its topics are released" if released else "it held no topics"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
