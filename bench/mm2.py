"""MirrorMaker 2 as the benchmarks run it (bench_mm2.py, bench_scale.py): its MirrorSourceConnector
and MirrorCheckpointConnector on the running stack's target Connect worker, timed until every
record and then the groups' synced offsets are on the target, the worker's CPU and RSS sampled, the
target read back and compared; and the reset of the target after it (and between runs)."""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from common import (
    PROJECT_DIR,
    BROKERS,
    SOURCE,
    STATE_DIR,
    TARGET,
    TARGET_CONNECT_URL,
    Result,
    TreeSampler,
    Workload,
    compare,
    delete_groups,
    delete_topics,
    poll,
    read_all,
    target_offsets,
)
from confluent_kafka.admin import AdminClient
from kmigrate.errors import ConnectorNotFound
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient

CLIENT_SETTINGS = "producer linger.ms 20, batch.size 512 KiB; consumer max.poll.records 2000, isolation read_committed"


def mm2_configs(prefix: str, tasks: int, identity: bool = True) -> dict[str, dict[str, str]]:
    """MirrorMaker 2 as a careful user runs it for a migration: identity replication policy (the
    target keeps the topic names; without `identity` its default policy, topics named
    source.<topic>, as a DR standby beside another mirror), offset syncs kept on the target (the
    source is not written to), read_committed (aborted records are not replicated), group offsets
    synced every second, and batching producer settings."""
    common = {
        "source.cluster.alias": "source", "target.cluster.alias": "target",
        "source.cluster.bootstrap.servers": SOURCE.bootstrap_servers,
        "target.cluster.bootstrap.servers": TARGET.bootstrap_servers,
        "replication.policy.class": "org.apache.kafka.connect.mirror."
                                    + ("IdentityReplicationPolicy" if identity else "DefaultReplicationPolicy"),
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


def stack_pid(service: str) -> int:
    profile = [] if BROKERS == 1 else ["--brokers", str(BROKERS)]
    status = json.loads(subprocess.run([sys.executable, str(PROJECT_DIR / "stack" / "stack.py"), *profile, "status"],
                                       capture_output=True, text=True).stdout)
    pid = status.get(service, {}).get("pid")
    if not pid:
        raise SystemExit(f"bench: {service} is not running; start the stack with `make stack-up`")
    return int(pid)


def run_mm2(w: Workload, args: argparse.Namespace) -> Result:
    """MM2 until every record of `w` is on the target and the groups' offsets have settled; or, when
    no record has arrived on the target for `args.mm2_stall_s` (from the start, or since the last
    one), MM2's outcome as it is: `Result.error`, the worker's last error line (its own words)."""
    result = Result("MirrorMaker 2")
    connect = ConnectClient(TARGET_CONNECT_URL)
    configs = mm2_configs(w.prefix, args.mm2_tasks)
    expected = {tp: len(rows) for tp, rows in w.source.items()}
    worker = stack_pid("target-connect")
    log = STATE_DIR / "target-connect" / "logs" / "server.log"
    log_from = log_mark(log)
    with ClusterAdmin(TARGET) as admin, TreeSampler(lambda: [worker]) as sampler:
        started = time.monotonic()
        for name, config in configs.items():
            connect.create(name, config)
        progress = {"records": -1, "since": started}

        def replicated() -> bool:
            present = set(admin.list_topics())
            have = [tp for tp in expected if tp[0] in present]
            try:
                ends = admin.watermarks_of(have) if have else {}
            except Exception:  # noqa: BLE001 - topics still being created: no leader yet
                return False
            records = sum(end for _, end in ends.values())
            if records > progress["records"]:
                progress.update(records=records, since=time.monotonic())
            elif time.monotonic() - progress["since"] >= args.mm2_stall_s:
                return True
            return len(have) == len(expected) and all(ends[tp][1] >= n for tp, n in expected.items())

        poll(replicated, "MirrorMaker 2 replicating every record", args.timeout_s, every_s=2.0)
        stalled = time.monotonic() - progress["since"] >= args.mm2_stall_s
        result.replicate_s = time.monotonic() - started
        if stalled:
            result.error = (f"{progress['records']:,} of {sum(expected.values()):,} records on the target, none "
                            f"for {args.mm2_stall_s:.0f}s; the worker logged: {last_error(log, log_from)}")
            print(f"  MM2: {result.error}", flush=True)
        else:
            print(f"  MM2: every record on the target after {result.replicate_s:.1f}s", flush=True)
            result.groups_s = _wait_for_group_offsets(w, started, args.group_sync_timeout_s, result)
    result.cpu_s, result.peak_rss = sampler.cpu_s, sampler.peak_rss
    if result.error:
        return result  # nothing on the target to hold against the source
    for name in configs:
        states = connect.status(name)
        failed = [t for t in states.get("tasks", []) if t.get("state") == "FAILED"]
        if failed:
            result.notes.append(f"{name}: {len(failed)} task(s) FAILED: {failed[0].get('trace', '')[:200]}")
    target = read_all(TARGET, w.partitions)
    compare(result, w, target, target_offsets(w.groups))
    return result


def log_mark(log: Path) -> tuple[int, int]:
    """Where the worker's log stands now: (its inode, its size), 0s when there is none."""
    return (log.stat().st_ino, log.stat().st_size) if log.exists() else (0, 0)


def last_error(log: Path, mark: tuple[int, int]) -> str:
    """What the worker last complained of since `mark` (`log_mark`): the last ERROR or WARN line that
    an exception follows, with that exception's message, and how many times it was logged. A log
    rolled over since (log4j's server.log.1) is read from the mark on, then the current one whole."""
    inode, offset = mark
    files = [(log, offset)]
    if log.exists() and log.stat().st_ino != inode:
        rolled = log.with_name(log.name + ".1")
        files = [*([(rolled, offset)] if rolled.exists() and rolled.stat().st_ino == inode else []), (log, 0)]
    lines = []
    for path, start in files:
        if path.exists():
            with path.open("rb") as f:
                f.seek(start)
                lines += [line.decode(errors="replace").rstrip() for line in f]
    complaints = []
    for i, line in enumerate(lines[:-1]):
        level = next((lv for lv in (" ERROR ", " WARN ") if lv in line), None)
        if level and "Exception" in lines[i + 1] and not lines[i + 1].startswith("["):
            message = line.split(level, 1)[1].split(" (org.apache", 1)[0]
            complaints.append((message, lines[i + 1].split(": ", 1)[-1].strip()[:200]))
    if not complaints:
        return "(none logged)"
    message, cause = complaints[-1]
    alike = sum(1 for _, c in complaints if c == cause)
    return f"{message} {cause} (logged {alike} times)"


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
