"""What the benchmark scripts share: the local clusters; a workload on the source, read back record
by record and held against what a tool put on the target (offsets equal, and every group's
switchover); removing what a benchmark created, so that a run leaves no data behind on the local
clusters (the migration itself never deletes anything); measuring (CPU seconds and peak RSS of a
process tree, the interval that says how far a median of a few noisy rounds can be trusted); and
reporting (the versions that ran, writing a result into docs/BENCHMARKS.md between a benchmark's
markers). Running the two tools compared is in mm2.py (MirrorMaker 2) and ours.py (this project)."""
from __future__ import annotations

import datetime
import math
import os
import platform
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import read_range, reader

PROJECT_DIR = Path(__file__).resolve().parent.parent
# BENCH_BROKERS=N (N >= 2): the stack's multi-broker profile, N nodes a cluster on their own ports
# (`make bench-scale BROKERS=2` starts it and sets this); 1, the default stack
BROKERS = int(os.environ.get("BENCH_BROKERS", "1"))


def _bootstrap(first_port: int) -> str:
    return ",".join(f"localhost:{first_port + 10 * n}" for n in range(BROKERS))


SOURCE = ClusterConfig.from_bootstrap("source", _bootstrap(19092 if BROKERS == 1 else 19292))
TARGET = ClusterConfig.from_bootstrap("target", _bootstrap(29092 if BROKERS == 1 else 29292))
TARGET_CONNECT_URL = "http://localhost:28083" if BROKERS == 1 else "http://localhost:28283"
STATE_DIR = PROJECT_DIR / (".stack" if BROKERS == 1 else ".stack-multi")


# ---------------------------------------------------------------------------------- processes

def process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user and system) of a process so far: this one's for None, else from /proc."""
    if pid is None:
        times = os.times()
        return times.user + times.system
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cluster_broker_pids(side: str, state_dir: Path = STATE_DIR) -> list[int]:
    """The broker processes of the stack's `side` cluster ("source", "target"), one broker a cluster or many."""
    dirs = sorted(state_dir.glob(f"{side}-kafka")) + sorted(state_dir.glob(f"{side}-kafka-*"))
    return [int((d / "pid").read_text().split()[0]) for d in dirs if (d / "pid").exists()]


def broker_pids(state_dir: Path) -> dict[str, int]:
    """The source's and the target's broker process of a one-broker stack's state directory."""
    return {f"{side}_broker": cluster_broker_pids(side, state_dir)[0] for side in ("source", "target")}


GC_PAUSE = re.compile(r"\[(\d{4}-\d\d-\d\dT[\d:.]+[+-]\d{4})\]\[[\d.]+s\] GC\(\d+\) Pause .* ([\d.]+)ms$")


def gc_pauses(service_dir: Path, began: float, ended: float) -> dict[str, float] | None:
    """The collection pauses a stack JVM logged (its logs/gc.log, `stack_settings.java_command`)
    between two epoch times: their count, their sum and the longest, in seconds; None without a log
    (a stack started before it had one)."""
    logs = sorted(service_dir.glob("logs/gc.log*"))
    if not logs:
        return None
    pauses = []
    for path in logs:
        for line in path.read_text(errors="replace").splitlines():
            match = GC_PAUSE.match(line)
            if match and began <= datetime.datetime.strptime(match[1], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() < ended:
                pauses.append(float(match[2]) / 1000)
    return {"pauses": len(pauses), "paused_s": round(sum(pauses), 2), "longest_s": round(max(pauses, default=0), 3)}

# ---------------------------------------------------------------------------------- workload

@dataclass
class Workload:
    """A workload seeded on the source: its topics, the groups committed on it and, once read back,
    its visible records."""

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


def send(producer: Producer, topic: str, partition: int, key: bytes, value: bytes) -> None:
    """Produce one record, waiting while the producer's queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, partition=partition)
            return
        except BufferError:
            producer.poll(0.05)


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


def commit_at(group: str, positions: dict[tuple[str, int], int]) -> None:
    """Commit `group` on the source at `positions`."""
    consumer = Consumer(SOURCE.consumer(group))
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in positions.items()], asynchronous=False)
    finally:
        consumer.close()


def target_offsets(groups: Iterable[str]) -> dict[str, dict[tuple[str, int], int]]:
    """The offsets `groups` have committed on the target."""
    with ClusterAdmin(TARGET) as admin:
        return {group: admin.committed_offsets(group) for group in groups}


# ---------------------------------------------------------------------------------- cleaning up

def create_spread(names: Sequence[str], partitions: int) -> dict[str, int]:
    """`partitions` spread evenly over the topics `names`, created on the source with one replica (on
    N brokers a broker holds 1/N); {topic: partition count}."""
    counts = {t: partitions // len(names) + (1 if i < partitions % len(names) else 0) for i, t in enumerate(names)}
    with ClusterAdmin(SOURCE) as admin:
        for topic, n in counts.items():
            admin.create_topic(topic, n, {}, replicas=1)
        admin.wait_for_topics(counts)
    return counts


def cleanup(w: Workload) -> None:
    """Delete the workload's topics and groups on both clusters."""
    for cluster in (SOURCE, TARGET):
        delete_topics(cluster, w.partitions)
        delete_groups(cluster, w.groups)


def delete_topics(cluster: ClusterConfig, topics: Iterable[str]) -> list[str]:
    """Delete those of `topics` that exist on `cluster`; returns them."""
    admin = AdminClient(cluster.admin())
    present = sorted(set(topics) & set(admin.list_topics(timeout=30).topics))
    if present:
        for future in admin.delete_topics(present, operation_timeout=60).values():
            future.result(timeout=90)
    return present


def wait_until_settled(cluster: ClusterConfig, quick_s: float = 1.0, timeout_s: float = 180.0) -> float:
    """Wait until the cluster creates a topic quickly again: a broker still taking thousands of
    deleted partitions apart applies a new topic seconds late (measured here: 2,000 partitions made
    in 0.1 s on a quiet broker, 6.8 s right after 2,000 were deleted), which would charge the
    previous step's deletions to the next measured step. Probes with a one-partition topic until
    its leader shows within `quick_s`; returns the seconds waited."""
    admin = AdminClient(cluster.admin())
    began = time.monotonic()
    while True:
        probe = f"bench-probe-{uuid.uuid4().hex[:8]}"
        created = time.monotonic()
        for future in admin.create_topics([NewTopic(probe, 1, 1)], operation_timeout=30).values():
            future.result(timeout=60)
        while True:
            try:
                described = admin.describe_topics(TopicCollection([probe]), request_timeout=30)[probe].result(timeout=30)
                if described.partitions and described.partitions[0].leader is not None:
                    break
            except Exception:  # noqa: BLE001 - not known to the broker yet
                pass
            time.sleep(0.05)
        took = time.monotonic() - created
        for future in admin.delete_topics([probe], operation_timeout=30).values():
            future.result(timeout=60)
        if took <= quick_s:
            return time.monotonic() - began
        if time.monotonic() - began > timeout_s:
            raise SystemExit(f"bench: {cluster.name} still takes {took:.1f} s to create a topic after {timeout_s:.0f} s")
        time.sleep(2.0)


def delete_groups(cluster: ClusterConfig, groups: Iterable[str]) -> None:
    """Delete `groups` on `cluster`; a group that does not exist there is fine."""
    groups = list(groups)
    if not groups:
        return
    admin = AdminClient(cluster.admin())  # kept referenced: a collected client never completes its futures
    for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
        try:
            future.result(timeout=60)
        except Exception:  # noqa: BLE001 - the group was never created on this cluster
            pass


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


def poll(condition: Callable[[], Any], what: str, timeout_s: float, every_s: float = 0.5) -> Any:
    """The first true value of `condition()`, asked every `every_s`; the benchmark stops after `timeout_s`.
    The loop is stack/stack_common.py's poll_until, the project's one poll (the tests' wait_until uses it too)."""
    import sys  # stack/'s modules are found by name, with stack/ on sys.path as stack.py puts it there

    if str(PROJECT_DIR / "stack") not in sys.path:
        sys.path.append(str(PROJECT_DIR / "stack"))
    from stack_common import poll_until

    return poll_until(condition, timeout_s, interval_s=every_s,
                      timed_out=lambda: SystemExit(f"bench: {what} did not happen within {timeout_s:.0f}s"))


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
    error: str | None = None  # the tool did not finish: why, in its own words
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


def median_interval(values: Sequence[float], level: float = 0.9) -> tuple[float, float, float]:
    """A distribution-free confidence interval of the median of `values`: the k-th smallest and
    k-th largest value, with the largest k whose coverage is at least `level` (any continuous
    distribution: each value is below the median with probability 1/2, so the number below is
    Binomial(n, 1/2)). Returns (low, high, coverage); with too few values for `level`, the
    widest interval there is, (min, max), and its smaller coverage."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        raise ValueError("no values")

    def coverage(k: int) -> float:  # P(X_(k) <= median <= X_(n-k+1))
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return ordered[k - 1], ordered[n - k], coverage(k)


# ---------------------------------------------------------------------------------- reporting

def versions() -> dict[str, str]:
    import pyspark
    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr.splitlines()[0]
    kafka = next(found.group(1) for path in sorted((PROJECT_DIR / "stack").glob("*.py"))  # where the stack pins it
                 if (found := re.search(r'KAFKA_VERSION = "([^"]+)"', path.read_text())))
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    mem = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal"))) // 2**20
    return {"kafka": kafka, "pyspark": pyspark.__version__, "java": java, "python": platform.python_version(),
            "machine": f"{os.cpu_count()} cores ({cpu}), {mem} GiB, {platform.system()} {platform.release()}"}


def write_docs(text: str, path: Path, start: str, end: str) -> None:
    """Put `text` (which begins with the marker `start` and ends with `end`) in place of what stands
    between those markers in the file at `path`, or after its end when they are not there yet."""
    current = path.read_text() if path.exists() else "# Benchmarks\n\nResults written by the benchmark scripts.\n"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        current = before + text + ("\n" + after if after else "")
    else:
        current = current.rstrip("\n") + "\n\n" + text
    path.write_text(current)
