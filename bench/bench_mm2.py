"""This project's copy against Apache Kafka's MirrorMaker 2, side by side on the local stack
(`make bench-mm2`).

One run: a workload is seeded on the source (default 6 topics x 4 partitions holding 1,000,000
records of 512 B, plus a compacted topic whose cleaner has run and a transactional topic with
aborted transactions, 50,000 records each), 8 consumer groups are committed at random positions
on it, then
  1. MirrorMaker 2 (MirrorSourceConnector + MirrorCheckpointConnector of the stack's Kafka, on the
     target's Connect worker) replicates the topics until every visible source record is on the
     target and the groups' translated offsets have stopped moving; the target is read back;
  2. the target is reset (MM2's connectors, topics, internal topics and groups deleted);
  3. this project copies the same topics: snapshot, the Spark copy job, the Spark verify job,
     group replication; the target is read back. It does so twice, the target reset in between
     (--ours): with a spark-submit per job (local[4]), then as Python clients of the project's
     Spark Connect server (make spark-connect-up; started before the timing, as MM2's Connect
     worker runs before its connectors are created). The headline is the second.
For each tool: wall time to fully replicated, records/s, MB/s, CPU seconds and peak RSS of the
copying processes (MM2: the target Connect worker JVM; ours: the spark-submit process tree, or
the client's process tree and the Spark Connect server's),
offsets equal (% of source records found at the same offset with the same value), and the
switchover of the 8 groups: every group's consumer resumed on the target from the offsets the tool
carried over, its records compared with what it had left to read on the source, record by record
(duplicates: records it had already read, or reads twice; missing: records it never gets;
unexpected: records a source consumer never sees, such as aborted ones).

The results go to docs/BENCHMARKS.md (between this benchmark's markers) and docs/bench_mm2.png;
the last line printed is one JSON object.

    python bench/bench_mm2.py [--records 1000000] [--side-records 50000] [--topics 6] [--partitions 4]
                              [--value-bytes 512] [--groups 8] [--mm2-tasks 4] [--quick] [--no-docs]
                              [--ours both|spark-submit|connect] [--spark-master 'local[4]']
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import delete_groups, delete_topics, write_docs
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConnectorNotFound
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.records import read_range, reader
from kmigrate.manifest import Manifest
from kmigrate.run import timeline
from kmigrate.run.clients import write_clients
from kmigrate.run.groups import replicate_groups
from kmigrate.run.snapshot import take_snapshot
from kmigrate_spark.conf import submit_args

PROJECT_DIR = Path(__file__).resolve().parent.parent
SOURCE = ClusterConfig.from_bootstrap("source", "localhost:19092")
TARGET = ClusterConfig.from_bootstrap("target", "localhost:29092")
TARGET_CONNECT_URL = "http://localhost:28083"
MARKER_START, MARKER_END = "<!-- bench-mm2:start -->", "<!-- bench-mm2:end -->"
CLIENT_SETTINGS = "producer linger.ms 20, batch.size 512 KiB; consumer max.poll.records 2000, isolation read_committed"


def mm2_configs(prefix: str, tasks: int) -> dict[str, dict[str, str]]:
    """MirrorMaker 2 as a careful user runs it for a migration: identity replication policy (the
    target keeps the topic names), offset syncs kept on the target (the source is not written to),
    read_committed (aborted records are not replicated), group offsets synced every second, and
    batching producer settings."""
    common = {
        "source.cluster.alias": "source", "target.cluster.alias": "target",
        "source.cluster.bootstrap.servers": SOURCE.bootstrap_servers,
        "target.cluster.bootstrap.servers": TARGET.bootstrap_servers,
        "replication.policy.class": "org.apache.kafka.connect.mirror.IdentityReplicationPolicy",
        "offset-syncs.topic.location": "target",
        "offset-syncs.topic.replication.factor": "1",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "value.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
    }
    topics = re.escape(prefix) + r"\..*"
    return {
        f"{prefix}-mm2-source": {
            **common,
            "connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
            "tasks.max": str(tasks),
            "topics": topics,
            "replication.factor": "1",
            "sync.topic.acls.enabled": "false",
            "refresh.topics.interval.seconds": "5",
            "source.consumer.isolation.level": "read_committed",
            "source.consumer.max.poll.records": "2000",
            "producer.override.linger.ms": "20",
            "producer.override.batch.size": str(512 << 10),
        },
        f"{prefix}-mm2-checkpoint": {
            **common,
            "connector.class": "org.apache.kafka.connect.mirror.MirrorCheckpointConnector",
            "tasks.max": "1",
            "groups": re.escape(prefix) + r"\..*",
            "sync.group.offsets.enabled": "true",
            "sync.group.offsets.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1",
            "refresh.groups.interval.seconds": "5",
            "checkpoints.topic.replication.factor": "1",
        },
    }


# ---------------------------------------------------------------------------------- workload

@dataclass
class Workload:
    prefix: str
    partitions: dict[str, int]                     # topic -> partition count
    groups: dict[str, dict[tuple[str, int], int]]  # group -> (topic, partition) -> committed source offset
    produced: int = 0
    compacted_away: int = 0
    source: dict[tuple[str, int], list[tuple[int, bytes]]] = field(default_factory=dict)

    @property
    def records(self) -> int:
        return sum(len(rows) for rows in self.source.values())

    @property
    def bytes(self) -> int:
        return sum(len(v) for rows in self.source.values() for _, v in rows)


def _value(pool: bytes, topic_index: int, partition: int, i: int, size: int) -> bytes:
    head = b"%d:%d:%d:" % (topic_index, partition, i)
    start = (i * 7919 + partition * 104729) % (len(pool) - size)
    return head + pool[start:start + size - len(head)]


def _send(producer: Producer, topic: str, partition: int, key: bytes, value: bytes) -> None:
    while True:
        try:
            producer.produce(topic, key=key, value=value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


def seed(prefix: str, args: argparse.Namespace) -> Workload:
    rng = random.Random(7)
    pool = rng.randbytes(1 << 20)  # values drawn from random bytes: they do not compress
    plain = [f"{prefix}.t{i}" for i in range(args.topics)]
    compacted, txn = f"{prefix}.compacted", f"{prefix}.txn"
    partitions = {**{t: args.partitions for t in plain}, compacted: 2, txn: 2}
    with ClusterAdmin(SOURCE) as admin:
        for topic in plain + [txn]:
            admin.create_topic(topic, partitions[topic], {})
        # small segments and an eager cleaner, so that compaction has run before the copies
        admin.create_topic(compacted, 2, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20),
                                          "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "100"})
    producer = Producer(SOURCE.producer(**{"linger.ms": 20, "batch.size": 1 << 20,
                                           "queue.buffering.max.messages": 500_000}))
    per_partition = args.records // (args.topics * args.partitions)
    produced = 0
    for index, topic in enumerate(plain):
        for p in range(args.partitions):
            for i in range(per_partition):
                _send(producer, topic, p, b"k%d" % i, _value(pool, index, p, i, args.value_bytes))
            produced += per_partition
    side = args.side_records // 2
    keys = max(1, side // 4)  # every key written about four times: the cleaner removes most
    for p in range(2):
        for i in range(side):
            _send(producer, compacted, p, b"key-%d" % (i % keys), _value(pool, 100, p, i, args.value_bytes))
        produced += side
    if producer.flush(300):
        raise SystemExit("bench: records left undelivered while seeding")
    txp = Producer(SOURCE.producer(**{"transactional.id": f"{prefix}-seed", "linger.ms": 20}))
    txp.init_transactions(30)
    batch = 500
    for start in range(0, side, batch):
        txp.begin_transaction()
        for p in range(2):
            for i in range(start, min(side, start + batch)):
                _send(txp, txn, p, b"t%d" % i, _value(pool, 101, p, i, args.value_bytes))
        if (start // batch) % 4 == 3:
            txp.flush(60)  # sent before the abort, so that aborted records stay in the log
            txp.abort_transaction(60)
        else:
            txp.commit_transaction(60)
        produced += 2 * (min(side, start + batch) - start)
    return Workload(prefix, partitions, {}, produced)


def read_partition(cluster: ClusterConfig, topic: str, partition: int) -> list[tuple[int, bytes]]:
    """Every record a read_committed consumer sees, as (offset, value)."""
    with ClusterAdmin(cluster) as admin:
        low, high = admin.watermarks(topic, partition)
    return [(m.offset(), m.value()) for m in read_range(cluster, topic, partition, low, high)]


def read_all(cluster: ClusterConfig, partitions: dict[str, int]) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Every visible record of every partition as (offset, value): one consumer assigned to all of
    them, up to the ends read first."""
    with ClusterAdmin(cluster) as admin:
        marks = admin.watermarks_of((t, p) for t, n in partitions.items() for p in range(n))
    out: dict[tuple[str, int], list[tuple[int, bytes]]] = {tp: [] for tp in marks}
    todo = {tp: high for tp, (low, high) in marks.items() if high > low}
    consumer = reader(cluster, **{"enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(t, p, marks[(t, p)][0]) for (t, p) in todo])
        deadline = time.monotonic() + 600
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, timeout=0.5):
                tp = (msg.topic(), msg.partition())
                if msg.error() is None:
                    out[tp].append((msg.offset(), msg.value()))
                    if msg.offset() + 1 >= todo.get(tp, 0):
                        todo.pop(tp, None)
                elif tp in todo and msg.offset() >= todo[tp]:  # end of partition
                    todo.pop(tp, None)
    finally:
        consumer.close()
    return out


def wait_for_compaction(w: Workload, produced: int, deadline_s: float) -> None:
    """Until the cleaner has removed records of the compacted topic (`produced` were written)."""
    topic = f"{w.prefix}.compacted"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        seen = sum(len(read_partition(SOURCE, topic, p)) for p in range(2))
        if seen < produced:
            w.compacted_away = produced - seen
            return
        time.sleep(2)
    print(f"bench: the compacted topic was not cleaned within {deadline_s:.0f}s; it is copied whole", flush=True)


def commit_groups(w: Workload, count: int) -> None:
    rng = random.Random(11)
    side = [f"{w.prefix}.compacted", f"{w.prefix}.txn"]
    plain = sorted(t for t in w.partitions if t not in side)
    with ClusterAdmin(SOURCE) as admin:
        for g in range(count):
            group = f"{w.prefix}.g{g}"
            positions: dict[tuple[str, int], int] = {}
            for topic in (plain[g % len(plain)], side[g % 2]):
                for p in range(w.partitions[topic]):
                    low, high = admin.watermarks(topic, p)
                    positions[(topic, p)] = rng.randint(low, high)
            commit_at(group, positions)
            w.groups[group] = positions


def commit_at(group: str, positions: dict[tuple[str, int], int]) -> None:
    """Commit `group` on the source at `positions`."""
    consumer = Consumer(SOURCE.consumer(group))
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


# ---------------------------------------------------------------------------------- measuring

class TreeSampler:
    """CPU seconds and peak RSS of processes and their descendants, sampled from /proc every
    `every_s` (CPU of a process counts its reaped children; the last sample of each pid is kept)."""

    def __init__(self, roots: Callable[[], Iterable[int]], every_s: float = 0.1) -> None:
        self.roots, self.every_s = roots, every_s
        self.cpu: dict[int, float] = {}
        self.peak_rss = 0
        self._baseline: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._tick = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")

    def __enter__(self) -> TreeSampler:
        self._baseline = self._sample(record=False)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def cpu_s(self) -> float:
        return sum(max(0.0, cpu - self._baseline.get(pid, 0.0)) for pid, cpu in self.cpu.items())

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._sample()

    def _sample(self, record: bool = True) -> dict[int, float]:
        roots = list(self.roots())
        if not roots:
            return {}
        children: dict[int, list[int]] = {}
        stats: dict[int, list[str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry)] = fields
            children.setdefault(int(fields[1]), []).append(int(entry))
        tree, todo = [], roots
        while todo:
            pid = todo.pop()
            if pid in stats:
                tree.append(pid)
                todo.extend(children.get(pid, ()))
        cpu = {pid: sum(int(x) for x in stats[pid][11:15]) / self._tick for pid in tree}
        if record:
            self.cpu.update(cpu)
            self.peak_rss = max(self.peak_rss, sum(int(stats[pid][21]) * self._page for pid in tree))
        return cpu


def stack_pid(service: str) -> int:
    status = json.loads(subprocess.run([sys.executable, str(PROJECT_DIR / "stack" / "stack.py"), "status"],
                                       capture_output=True, text=True, check=True).stdout)
    pid = status.get(service, {}).get("pid")
    if not pid:
        raise SystemExit(f"bench: {service} is not running; start the stack with `make stack-up`")
    return int(pid)


def poll(condition: Callable[[], Any], what: str, timeout_s: float, every_s: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"bench: {what} did not happen within {timeout_s:.0f}s")
        time.sleep(every_s)


@dataclass
class Result:
    tool: str
    replicate_s: float = 0.0
    groups_s: float = 0.0
    verify_s: float | None = None
    copy_phase_s: float | None = None  # ours: the copy job's own time, from warmed-up executors to the last row
    snapshot_s: float | None = None  # ours: the snapshot before the copy job
    warm_up_s: float | None = None  # ours: the copy job's warm-up (a Python worker a task slot, kmigrate imported)
    cpu_s: float = 0.0
    peak_rss: int = 0
    records: int = 0
    target_records: int = 0
    offsets_equal: int = 0
    duplicates: int = 0
    missing: int = 0
    unexpected: int = 0
    groups_without_offsets: int = 0
    notes: list[str] = field(default_factory=list)

    def row(self, w: Workload) -> dict[str, Any]:
        return {
            "replicate_s": round(self.replicate_s, 2), "groups_s": round(self.groups_s, 2),
            "verify_s": None if self.verify_s is None else round(self.verify_s, 2),
            **{key: None if value is None else round(value, 2) for key, value in (
                ("copy_phase_s", self.copy_phase_s), ("snapshot_s", self.snapshot_s), ("warm_up_s", self.warm_up_s))},
            "records_per_s": round(w.records / self.replicate_s), "mb_per_s": round(w.bytes / self.replicate_s / 1e6, 1),
            "cpu_s": round(self.cpu_s, 1), "peak_rss_mb": round(self.peak_rss / 2**20),
            "target_records": self.target_records,
            "offsets_equal_pct": round(100.0 * self.offsets_equal / max(1, w.records), 3),
            "duplicates": self.duplicates, "missing": self.missing, "unexpected": self.unexpected,
            "partitions_without_group_offset": self.groups_without_offsets,
        }


def compare(result: Result, w: Workload, target: dict[tuple[str, int], list[tuple[int, bytes]]],
            committed: dict[str, dict[tuple[str, int], int]]) -> None:
    """Offsets equal, and the switchover of every group, record by record."""
    result.target_records = sum(len(rows) for rows in target.values())
    for tp, rows in w.source.items():
        on_target = dict(target.get(tp, ()))
        result.offsets_equal += sum(1 for offset, value in rows if on_target.get(offset) == value)
    for group, positions in w.groups.items():
        for tp, source_position in positions.items():
            source_rows = w.source[tp]
            already_read = {v for o, v in source_rows if o < source_position}
            expected = {v for o, v in source_rows if o >= source_position}
            start = committed.get(group, {}).get(tp)
            if start is None:  # no offset carried over: the consumer starts at the earliest record
                result.groups_without_offsets += 1
                start = 0
            seen: set[bytes] = set()
            for offset, value in target.get(tp, ()):
                if offset < start:
                    continue
                if value in seen or value in already_read:
                    result.duplicates += 1
                elif value not in expected:
                    result.unexpected += 1
                seen.add(value)
            result.missing += len(expected - seen)


def target_offsets(groups: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
    with ClusterAdmin(TARGET) as admin:
        return {group: admin.committed_offsets(group) for group in groups}


# ---------------------------------------------------------------------------------- the tools

def run_mm2(w: Workload, args: argparse.Namespace) -> Result:
    result = Result("MirrorMaker 2")
    connect = ConnectClient(TARGET_CONNECT_URL)
    configs = mm2_configs(w.prefix, args.mm2_tasks)
    expected = {tp: len(rows) for tp, rows in w.source.items()}
    worker = stack_pid("target-connect")
    with ClusterAdmin(TARGET) as admin, TreeSampler(lambda: [worker]) as sampler:
        started = time.monotonic()
        for name, config in configs.items():
            connect.create(name, config)

        def replicated() -> bool:
            try:
                return all(admin.watermarks(t, p)[1] >= n for (t, p), n in expected.items())
            except Exception:  # noqa: BLE001 - topics not created yet
                return False

        poll(replicated, "MirrorMaker 2 replicating every record", args.timeout_s)
        result.replicate_s = time.monotonic() - started
        print(f"  MM2: every record on the target after {result.replicate_s:.1f}s", flush=True)
        result.groups_s = _wait_for_group_offsets(w, started, args.group_sync_timeout_s, result)
    result.cpu_s, result.peak_rss = sampler.cpu_s, sampler.peak_rss
    for name in configs:
        states = connect.status(name)
        failed = [t for t in states.get("tasks", []) if t.get("state") == "FAILED"]
        if failed:
            result.notes.append(f"{name}: {len(failed)} task(s) FAILED: {failed[0].get('trace', '')[:200]}")
    target = read_all(TARGET, w.partitions)
    compare(result, w, target, target_offsets(w.groups))
    return result


def _wait_for_group_offsets(w: Workload, started: float, timeout_s: float, result: Result) -> float:
    """Seconds from the start until MM2's synced group offsets have not changed for 5 s (or the
    timeout); MM2 syncs a partition's offset only once its checkpoint can be translated."""
    deadline = time.monotonic() + timeout_s
    last, stable_since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = target_offsets(w.groups)
        wanted = sum(len(p) for p in w.groups.values())
        have = sum(len(p) for p in now.values())
        if now != last:
            last, stable_since = now, time.monotonic()
        elif have and time.monotonic() - stable_since >= 5:
            if have == wanted:
                return stable_since - started
            if time.monotonic() - stable_since >= 20:  # some partitions never get an offset
                result.notes.append(f"MM2 synced {have} of {wanted} group partitions")
                return stable_since - started
        time.sleep(0.5)
    result.notes.append(f"group offsets still moving or absent after {timeout_s:.0f}s")
    return time.monotonic() - started


def reset_target(w: Workload) -> None:
    """Delete MM2's connectors, the copied topics, MM2's internal topics and the groups on the
    target, and wait until they are gone."""
    connect = ConnectClient(TARGET_CONNECT_URL)
    for name in mm2_configs(w.prefix, 1):
        try:
            connect.delete(name)
        except ConnectorNotFound:
            pass
    poll(lambda: not any(n.startswith(w.prefix) for n in connect.connectors()), "MM2 connectors deleted", 60)
    doomed = delete_topics(TARGET, [*w.partitions, "mm2-offset-syncs.target.internal", "source.checkpoints.internal"])
    delete_groups(TARGET, w.groups)
    admin = AdminClient(TARGET.admin())
    poll(lambda: not set(doomed) & set(admin.list_topics(timeout=30).topics), "target topics deleted", 120)


@dataclass
class SparkConnectServer:
    url: str
    pid: int
    started: bool  # by this run (then it stops it)


def spark_cluster(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROJECT_DIR / "stack" / "spark_cluster.py"), *args],
                          capture_output=True, text=True)


def spark_connect_up(master: str) -> SparkConnectServer:
    """The project's Spark Connect server (make spark-connect-up), started unless it runs, before
    any timing: like MM2's Connect worker, a service that is already up when the copy starts."""
    up = spark_cluster("connect-up", "--connect-master", master)
    if up.returncode != 0:
        raise SystemExit(f"bench: the Spark Connect server did not start:\n{up.stdout}{up.stderr}")
    pid = json.loads(spark_cluster("status").stdout)["services"]["spark-connect"]
    return SparkConnectServer("sc://127.0.0.1:15002", int(pid), "started spark-connect" in up.stdout)


def run_ours(w: Workload, args: argparse.Namespace, workdir: Path, server: SparkConnectServer | None = None,
             verify_after: bool = False) -> Result:
    """Snapshot, copy job, verify job, group replication. With `server`, the jobs run as Python
    clients of that running Spark Connect server; without, each is a spark-submit of its own. With
    `verify_after`, the copy job verifies in its own Spark session, as the migration DAG runs it
    (the verification's seconds then come from the run's timeline)."""
    result = Result("kmigrate (Spark Connect server)" if server else "kmigrate (spark-submit)")
    state, run_id = str(workdir / "state"), "bench-mm2"
    manifest = Manifest(state, run_id)
    clients = write_clients(workdir / "clients.json", SOURCE, TARGET)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    if server:
        launcher = [sys.executable]
    else:
        launcher = [str(Path(sys.executable).parent / "spark-submit"), "--master", args.spark_master,
                    *submit_args({"spark.ui.enabled": "false"})]

    def job(script: str, *extra: str) -> float:
        begun = time.monotonic()
        proc = subprocess.Popen([*launcher, str(PROJECT_DIR / "spark_jobs" / script), "--state-location", state,
                                 "--run-id", run_id, "--clients", str(clients), *extra,
                                 *(["--remote", server.url] if server else [])],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=PROJECT_DIR)
        with TreeSampler(lambda: [proc.pid, *([server.pid] if server else [])]) as sampler:
            out, _ = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"bench: {script} failed (exit {proc.returncode}):\n{out[-3000:]}")
        if script == "copy_partitions.py":
            result.cpu_s, result.peak_rss = sampler.cpu_s, sampler.peak_rss
        name = script.removesuffix(".py")
        for line in out.splitlines():  # the job's own phases (not its line a partition)
            if line.startswith(f"{name}: ") and "] " not in line:
                print(f"    {line}", flush=True)
        return time.monotonic() - begun

    started = time.monotonic()
    take_snapshot(manifest, SOURCE, topics_include=re.escape(w.prefix) + r"\..*",
                  groups=re.escape(w.prefix) + r"\..*")
    result.snapshot_s = time.monotonic() - started
    if verify_after:
        job("copy_partitions.py", "--no-verify", "--verify-after")
        result.verify_s = next(s["seconds"] for s in timeline.steps(manifest) if s["step"] == "verify")
        result.replicate_s = time.monotonic() - started - result.verify_s
    else:
        job("copy_partitions.py", "--no-verify")  # as the DR drill DAG runs it: the verify job follows
        result.replicate_s = time.monotonic() - started
    [part] = [p for p in manifest.parts() if p.startswith("copy-results/")]
    copied = manifest.read(part)
    result.copy_phase_s, result.warm_up_s = copied["seconds"], copied["warm_up_seconds"]
    print(f"  {result.tool}: every partition copied after {result.replicate_s:.1f}s (snapshot "
          f"{result.snapshot_s:.1f}s, job start-up {result.replicate_s - result.snapshot_s - result.copy_phase_s:.1f}s "
          f"of which warm-up {result.warm_up_s:.1f}s, copying {result.copy_phase_s:.1f}s)", flush=True)
    if not verify_after:
        result.verify_s = job("verify_partitions.py")
    groups_started = time.monotonic()
    replicate_groups(manifest, TARGET)
    result.groups_s = result.replicate_s + (time.monotonic() - groups_started)
    target = read_all(TARGET, w.partitions)
    compare(result, w, target, target_offsets(w.groups))
    return result


def cleanup(w: Workload) -> None:
    for cluster in (SOURCE, TARGET):
        delete_topics(cluster, w.partitions)
        delete_groups(cluster, w.groups)


# ---------------------------------------------------------------------------------- reporting

def versions() -> dict[str, str]:
    import pyspark
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    kafka = re.search(r'KAFKA_VERSION = "([^"]+)"', (PROJECT_DIR / "stack" / "stack.py").read_text()).group(1)
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))) // 2**20
    return {"kafka": kafka, "pyspark": pyspark.__version__, "java": java, "python": platform.python_version(),
            "machine": f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.system()} {platform.release()}"}


def chart(path: Path, rows: dict[str, dict[str, Any]]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tools = list(rows)
    colors = ["#8c8c8c", *["#9dbbe0", "#2f6db5"][-(len(tools) - 1):]]  # MM2 grey, ours blue
    labels = [t.replace(" (", "\n").replace(")", "").replace("Spark Connect server", "Connect server") for t in tools]
    panels = [("records/s to fully replicated", "records_per_s"), ("CPU seconds of the copying processes", "cpu_s"),
              ("switchover: duplicates + missing", None), ("offsets equal (%)", "offsets_equal_pct")]
    fig, axes = plt.subplots(1, len(panels), figsize=(15, 3.6))
    for ax, (title, key) in zip(axes, panels):
        values = [r["duplicates"] + r["missing"] if key is None else r[key] for r in rows.values()]
        bars = ax.bar(labels, values, color=colors)
        ax.bar_label(bars, labels=[f"{v:,}" if isinstance(v, int) else f"{v:,.1f}" for v in values], fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=8)
        ax.margins(y=0.2)
    fig.suptitle("MirrorMaker 2 vs kmigrate, one run on the same local clusters", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def markdown(w: Workload, args: argparse.Namespace, rows: dict[str, dict[str, Any]], summary: dict[str, Any],
             info: dict[str, str], notes: list[str]) -> str:
    tools = list(rows)

    def line(label: str, key: str, fmt: str = "{}", mm2: str | None = None) -> str:
        cells = [mm2 if mm2 is not None and tool == "MirrorMaker 2" else
                 "-" if rows[tool][key] is None else fmt.format(rows[tool][key]) for tool in tools]
        return f"| {label} | " + " | ".join(cells) + " |"

    lines = [
        MARKER_START,
        "## This project against MirrorMaker 2 (`make bench-mm2`)",
        "",
        f"Run on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC; {info['machine']}.",
        f"Kafka {info['kafka']} (KRaft, one broker per cluster, started by `make stack-up`), {info['java']}, "
        f"PySpark {info['pyspark']}, Python {info['python']}.",
        "",
        f"Workload: {args.topics} topics x {args.partitions} partitions, {args.records:,} records of "
        f"{args.value_bytes} B (random bytes, incompressible); a compacted topic (2 partitions, "
        f"{args.side_records // 2:,} records, {w.compacted_away:,} removed by the cleaner before the copies) and a "
        f"transactional topic (2 partitions, {args.side_records // 2:,} records in transactions of 500 per "
        f"partition, every 4th aborted). {w.records:,} visible records, {w.bytes / 1e6:,.0f} MB of values. "
        f"{len(w.groups)} consumer groups committed at random positions (each on one plain topic and the "
        "compacted or the transactional topic).",
        "",
        "| | " + " | ".join(tools) + " |",
        "|---|" + "---:|" * len(tools),
        line("wall time to fully replicated (s)", "replicate_s"),
        line("records/s", "records_per_s", "{:,}"),
        line("MB/s (values)", "mb_per_s"),
        line("group offsets on the target after (s)", "groups_s"),
        line("of which the snapshot (s)", "snapshot_s"),
        line("of which the copy job's warm-up: a Python worker a task slot (s)", "warm_up_s"),
        line("of which copying, after the Spark session and warm-up (s)", "copy_phase_s"),
        line("verification (s)", "verify_s", mm2="not offered"),
        line("CPU seconds of the copying processes", "cpu_s"),
        line("peak RSS of the copying processes (MiB)", "peak_rss_mb"),
        line("records on the target", "target_records", "{:,}"),
        line("offsets equal (% of source records)", "offsets_equal_pct"),
        line("switchover duplicates", "duplicates", "{:,}"),
        line("switchover missing", "missing", "{:,}"),
        line("switchover unexpected (never visible on the source)", "unexpected", "{:,}"),
        line("group partitions with no offset on the target", "partitions_without_group_offset"),
        "",
        f"**speedup_vs_mm2 = {summary['speedup_vs_mm2']}** (records/s to fully replicated, "
        f"{tools[-1]} / MM2)" + ("." if "speedup_vs_mm2_spark_submit" not in summary else
                                 f"; with a spark-submit per job: {summary['speedup_vs_mm2_spark_submit']}."),
        "",
        "![MirrorMaker 2 against kmigrate](bench_mm2.png)",
        "",
        "How each was run and measured:",
        f"- MirrorMaker 2: MirrorSourceConnector (tasks.max {args.mm2_tasks}) and MirrorCheckpointConnector on the "
        "target cluster's Connect worker (one distributed worker, heap 512 MiB, already running), identity "
        "replication policy, offset-syncs topic on the target (the source is not written to), "
        f"{CLIENT_SETTINGS}, refresh.topics.interval.seconds 5, sync.group.offsets.enabled with "
        "sync.group.offsets.interval.seconds 1 and emit.checkpoints.interval.seconds 1, offset.lag.max at its "
        "default (100). Timed from the connectors' creation until every partition's end offset on the target "
        "reached the source's visible record count; group offsets until they had not changed for 5 s. CPU and "
        "RSS: the Connect worker JVM (its RSS includes its idle footprint).",
        "- kmigrate: snapshot of topics and groups, then spark_jobs/copy_partitions.py --no-verify (as the DAG "
        "runs it), timed from the snapshot to the job's exit; then verify_partitions.py (both sides' digests, "
        "every partition) and group replication. Two ways of running the jobs: "
        f"(spark-submit) `spark-submit --master {args.spark_master}` a job, a new Spark application each time "
        "(JVM start-up, session, Python workers included in the time; CPU and RSS of the spark-submit process "
        "tree); (Spark Connect server) `python JOB.py --remote sc://...`, a Python client of the project's Spark "
        f"Connect server (`make spark-connect-up`, master {args.spark_master}), started before the timing as "
        "MM2's Connect worker is, in the jobs' shared session (connect-up starts its Python workers, and Spark "
        "stops those idle for a minute, so the copy job's warm-up is in the time); CPU and RSS of the client "
        "process tree plus the server's (JVM and Python workers; its RSS includes its idle footprint).",
        "- Offsets equal: a source record counts when the target holds the same value at the same offset. "
        "Switchover: each group's consumer reads the target from the offset the tool carried over (the earliest "
        "offset where it carried none), read_committed, compared value by value with what the group had left to "
        "read on the source.",
        "- MM2 ran first, then the target was reset (connectors, topics, internal topics, groups deleted) before "
        "each kmigrate run; the source was not touched between them (it was written just before MM2 ran, so "
        "all of them read it from the page cache).",
    ]
    lines += [f"- Note: {n}" for n in notes]
    lines += ["", f"Last line of the run: `{json.dumps(summary)}`", MARKER_END]
    return "\n".join(lines) + "\n"


def measure(prefix: str, args: argparse.Namespace, ways: list[str],
            server: SparkConnectServer | None) -> tuple[list[Result], Workload]:
    """Seed, run MM2, then each of our ways; the topics are deleted at the end."""
    seeded = time.monotonic()
    w = seed(prefix, args)
    wait_for_compaction(w, args.side_records // 2 * 2, 90)
    commit_groups(w, args.groups)
    w.source = read_all(SOURCE, w.partitions)
    print(f"seeded {w.produced:,} records ({w.records:,} visible, {w.bytes / 1e6:,.0f} MB of values, "
          f"{w.compacted_away:,} compacted away) and {len(w.groups)} groups in {time.monotonic() - seeded:.0f}s", flush=True)
    try:
        print("MirrorMaker 2 ...", flush=True)
        mm2 = run_mm2(w, args)
        results = [mm2]
        for way in ways:
            reset_target(w)
            print(f"kmigrate ({way}) ...", flush=True)
            with tempfile.TemporaryDirectory() as workdir:
                results.append(run_ours(w, args, Path(workdir), server if way == "connect" else None))
    finally:
        cleanup(w)
    return results, w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000, help="records of the plain topics, in all")
    parser.add_argument("--side-records", type=int, default=50_000,
                        help="records of the compacted topic, and of the transactional one")
    parser.add_argument("--topics", type=int, default=6)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--value-bytes", type=int, default=512)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--mm2-tasks", type=int, default=4)
    parser.add_argument("--spark-master", default="local[4]",
                        help="where the Spark jobs run (default local[4]: four copy tasks, as MM2 gets four tasks)")
    parser.add_argument("--ours", choices=["both", "spark-submit", "connect"], default="both",
                        help="how this project's jobs run: a spark-submit per job, on a running Spark Connect "
                             "server (started before the timing, on --spark-master), or both, one after the other")
    parser.add_argument("--timeout-s", type=float, default=1200, help="longest wait for one tool to replicate")
    parser.add_argument("--group-sync-timeout-s", type=float, default=120)
    parser.add_argument("--quick", action="store_true", help="a small run: 100,000 records, 5,000 per side topic")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/BENCHMARKS.md and the chart")
    args = parser.parse_args()
    if args.quick:
        args.records, args.side_records = 100_000, 5_000
    prefix = f"mm2b{uuid.uuid4().hex[:6]}"
    info = versions()
    print(f"bench-mm2: {info['machine']}; Kafka {info['kafka']}, PySpark {info['pyspark']}; topics {prefix}.*", flush=True)
    ways = ["spark-submit", "connect"] if args.ours == "both" else [args.ours]
    # started before the workload exists, as the Connect worker MM2 runs on was
    server = spark_connect_up(args.spark_master) if "connect" in ways else None
    try:
        results, w = measure(prefix, args, ways, server)
    finally:
        if server and server.started:
            spark_cluster("connect-down")
    # the headline: on the running Spark Connect server when it ran (a running service, as MM2's
    # Connect worker is); duplicates, missing and offsets: the worst of our runs
    mm2, ours, mine = results[0], results[-1], results[1:]
    rows = {r.tool: r.row(w) for r in results}
    for tool, row in rows.items():
        print(f"{tool}: {json.dumps(row)}", flush=True)
    summary = {
        "records": w.records, "bytes": w.bytes,
        "mm2_records_per_s": rows[mm2.tool]["records_per_s"], "ours_records_per_s": rows[ours.tool]["records_per_s"],
        "speedup_vs_mm2": round(mm2.replicate_s / ours.replicate_s, 2),
        "mm2_s": rows[mm2.tool]["replicate_s"], "ours_s": rows[ours.tool]["replicate_s"],
        "ours_copy_phase_s": rows[ours.tool]["copy_phase_s"],
        "mm2_cpu_s": rows[mm2.tool]["cpu_s"], "ours_cpu_s": rows[ours.tool]["cpu_s"],
        "ours_duplicates": max(r.duplicates for r in mine), "ours_missing": max(r.missing for r in mine),
        "mm2_duplicates": mm2.duplicates, "mm2_missing": mm2.missing,
        "mm2_unexpected": mm2.unexpected, "ours_unexpected": max(r.unexpected for r in mine),
        "ours_offsets_equal_pct": min(rows[r.tool]["offsets_equal_pct"] for r in mine),
        "mm2_offsets_equal_pct": rows[mm2.tool]["offsets_equal_pct"],
        "ours_way": "spark-connect" if ours.tool.endswith("server)") else "spark-submit",
        **({"speedup_vs_mm2_spark_submit": round(mm2.replicate_s / mine[0].replicate_s, 2),
            "ours_spark_submit_s": rows[mine[0].tool]["replicate_s"]} if len(mine) > 1 else {}),
    }
    if not args.no_docs:
        docs = PROJECT_DIR / "docs"
        chart(docs / "bench_mm2.png", rows)
        write_docs(markdown(w, args, rows, summary, info, mm2.notes + ours.notes), docs / "BENCHMARKS.md",
                   MARKER_START, MARKER_END)
        print(f"wrote {docs / 'BENCHMARKS.md'} and {docs / 'bench_mm2.png'}", flush=True)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
