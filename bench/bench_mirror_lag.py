"""make bench-mirror-lag: how long a record takes to reach the DR cluster through the mirror's copy
alone (kmigrate.run.mirror.task, the code of the mirror's Spark tasks), without Spark, Airflow
or MirrorMaker 2 beside it, for several settings of the copy one after another in one run.

The load is bench-dr's (dr_load.Load: a plain topic of 20 partitions, a transactional one of 2 and
a compacted one of 2, --rate-mb MB/s of 1 KiB values, two groups consuming); the DR topics are
created first. Each setting runs --tasks processes (as many Spark tasks), each following its share
of the 24 partitions for one term of --seconds while the load writes; every 10th record of the
plain topic is timed from its acknowledgement on the source to the DR cluster's end passing it (read
every --read-every-s, 0.1 s as in bench-dr). A setting is `COPIES_AT_ONCE:POOL[:IN_STEP[:BY_BATCH[:IN_FLIGHT[:JOIN[:LINGER]]]]]`
(copies side by side in a task, idle clients kept a key in the process's pools, partitions followed
in step with the source once their copies allow: 1, or copied only: 0; the live verification
settling whole batches byte for byte: 1, or reading every record: 0; the Produce requests in step
unanswered a DR leader before what comes for it is held and joined: 2 is shipped; the batches one
Fetch answer brings for a partition joined before the write in step: 1, shipped, or written as
they came: 0; the milliseconds a Fetch in step waits for more after an answer with records: 10
shipped, 0 none); the default compares the copies alone, the verification reading every record,
and the shipped settings (8:10:1:1). The tasks verify what they copied every --verify-every-s, as
the mirror's do. With --stall-s, the first task's process is stopped (SIGSTOP) that long every 6 s
while the load runs, as a busy machine does not schedule a process. Last line: one JSON object, p50/p90/p99/p99.9 and max seconds a setting, and
the CPU seconds its task processes and each cluster's broker used (the broker's while the load ran).
With --renamed each setting runs twice, one run after the other: the DR topics under the source's
names, then under a prefix (`dr.`, a consolidation's mirror: kmigrate.renames), to compare what a
rename costs the copy.

    python bench/bench_mirror_lag.py [--seconds 60] [--tasks 2] [--settings 8:10:0,8:10:1:0,8:10:1:1]
    python bench/bench_mirror_lag.py --settings 8:10:1:1 --renamed
    python bench/bench_mirror_lag.py --stall-s 0.5 --read-every-s 0.02 --settings 8:10:1:1
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PROJECT_DIR, SOURCE, TARGET, broker_pids, delete_groups, delete_topics, process_cpu_s  # noqa: E402
from dr_load import Load, Watcher, latencies, percentile  # noqa: E402
from kmigrate.kafka.admin import ClusterAdmin  # noqa: E402
from kmigrate.model import WorkUnit  # noqa: E402
from kmigrate.run.mirror.timings import VERIFY_EVERY_S  # noqa: E402

STALL_EVERY_S = 6.0


def one_task(units: list[WorkUnit], seconds: float, copies_at_once: int, pool: int, in_step: bool, by_batch: bool,
           in_flight: int, join: bool, linger_ms: int, verify_every_s: float, rows) -> None:  # noqa: ANN001
    """One task's term, in a process of its own (a Spark task's Python worker)."""
    from kmigrate.kafka import leaders, pool as pools, records
    from kmigrate.run.mirror import stream, task, term as terms
    from kmigrate.run.verify import partition as verification

    stream.WRITES_IN_FLIGHT = in_flight
    stream.JOIN_BYTES = stream.JOIN_BYTES if join else 0  # a limit of 0 joins no two batches
    stream.LINGER_MS = linger_ms
    task.COPIES_AT_ONCE = copies_at_once
    task.IN_STEP = in_step
    verification.LIVE_BY_BATCH = by_batch
    for kept in (pools.admins, leaders.connections, records.readers):
        kept.per_key = pool
    term = terms.Term(1, f"lag-{units[0].topic}", seconds, verify_every_s=verify_every_s)
    done = task.mirror_bin([(u, {}) for u in units], (SOURCE, TARGET), term)
    used = os.times()
    rows.put([{**row, "cpu_s": used.user + used.system} for row in done])


def one(setting: str, seconds: float, tasks: int, rate_mb: float, verify_every_s: float, stall_s: float,
        read_every_s: float, dr_prefix: str = "") -> dict:
    copies_at_once, pool, in_step, by_batch, in_flight, join, linger_ms = (
        int(x) for x in (setting + ":1:1:2:1:10").split(":")[:7])
    prefix = f"lag{uuid.uuid4().hex[:6]}"
    load = Load(prefix, rate_mb, 1024)
    load.create()
    shapes = {load.plain: (20, {}), load.tx: (2, {}), load.compact: (2, {"cleanup.policy": "compact"})}
    with ClusterAdmin(TARGET) as admin:
        for topic, (partitions, configs) in shapes.items():
            admin.create_topic(dr_prefix + topic, partitions, configs)
        admin.wait_for_topics({dr_prefix + t: n for t, (n, _) in shapes.items()})
    units = [WorkUnit(t, p, 0, target_topic=dr_prefix + t) for t, (n, _) in shapes.items() for p in range(n)]
    watcher = Watcher({"ours": dr_prefix + load.plain}, read_every_s)
    context = multiprocessing.get_context("spawn")
    rows = context.Queue()
    workers = [context.Process(target=one_task, args=(units[i::tasks], seconds + 5, copies_at_once, pool, bool(in_step),
                                                         bool(by_batch), in_flight, bool(join), linger_ms, verify_every_s, rows))
               for i in range(tasks)]
    try:
        watcher.start()
        for worker in workers:
            worker.start()
        time.sleep(3)  # the load starts once the tasks follow (the bench's pace, not a wait for a condition)
        began = time.time()
        brokers = broker_pids(PROJECT_DIR / ".stack")
        before = {side: process_cpu_s(pid) for side, pid in brokers.items()}
        load.start()
        stalls = stall(workers[0].pid, seconds, stall_s) if stall_s else 0
        time.sleep(max(0.0, began + seconds - time.time()))
        load.stop()
        broker_cpu = {f"{side}_cpu_s": round(process_cpu_s(pid) - before[side], 1) for side, pid in brokers.items()}
        done = [rows.get(timeout=120) for _ in workers]
    finally:
        load.stopping.set()
        watcher.stopping.set()
        for worker in workers:
            worker.join(60)
            if worker.is_alive():
                worker.kill()
        delete_topics(SOURCE, list(shapes))
        delete_topics(TARGET, [dr_prefix + t for t in shapes])
        delete_groups(SOURCE, load.groups)
    lags = latencies(load.acked, watcher.samples, "ours")
    return {"setting": setting, "renamed": bool(dr_prefix), "p50_s": percentile(lags, 0.5), "p90_s": percentile(lags, 0.9),
            "p99_s": percentile(lags, 0.99), "p999_s": percentile(lags, 0.999), "max_s": round(max(lags), 3),
            "stalls": stalls, "samples": len(lags), "copies": sum(r["copies"] for task in done for r in task),
            "tasks_cpu_s": round(sum(task[0]["cpu_s"] for task in done if task), 1), **broker_cpu,
            # each partition's last verification while live, its seconds added up: one round's cost
            "verification_s": round(sum((r["verified"] or {}).get("seconds", 0) for task in done for r in task), 2),
            "failed": [r["error"] for task in done for r in task if r["error"]][:3]}


def stall(pid: int, seconds: float, stall_s: float) -> int:
    """Stop the task process `pid` for `stall_s` every STALL_EVERY_S while the load runs (a process
    the machine does not schedule for that long); the stops made."""
    stops, end = 0, time.time() + seconds - STALL_EVERY_S
    while time.time() < end:
        time.sleep(STALL_EVERY_S - stall_s)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(stall_s)  # the stop's length is what is measured
        finally:
            os.kill(pid, signal.SIGCONT)
        stops += 1
    return stops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--tasks", type=int, default=2)
    parser.add_argument("--rate-mb", type=float, default=5.0)
    parser.add_argument("--settings", default="8:10:0,8:10:1:0,8:10:1:1")
    parser.add_argument("--verify-every-s", type=float, default=VERIFY_EVERY_S, help="as the mirror's (MirrorSpec)")
    parser.add_argument("--read-every-s", type=float, default=0.1, help="the DR cluster's ends read this often")
    parser.add_argument("--renamed", action="store_true",
                        help="each setting twice: the DR topics under the source's names, then under the prefix dr.")
    parser.add_argument("--stall-s", type=float, default=0.0,
                        help=f"stop the first task's process this long every {STALL_EVERY_S:.0f} s (SIGSTOP)")
    args = parser.parse_args()
    results = []
    for setting in args.settings.split(","):
        for dr_prefix in ("", "dr.") if args.renamed else ("",):
            result = one(setting, args.seconds, args.tasks, args.rate_mb, args.verify_every_s, args.stall_s,
                         args.read_every_s, dr_prefix)
            print(f"bench-mirror-lag: {json.dumps(result)}", flush=True)
            results.append(result)
    print(json.dumps({"seconds": args.seconds, "tasks": args.tasks, "rate_mb": args.rate_mb,
                      "verify_every_s": args.verify_every_s, "stall_s": args.stall_s,
                      "read_every_s": args.read_every_s, "settings": results}))
    return 0 if all(not r["failed"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
