"""Spark copy job benchmark on the local stack (`make bench-spark`).

The same workload (default 3 topics x 4 partitions x 300,000 records of 100 B, 30 MB a partition)
is seeded four times under different topic names, then copied to the target four ways:
  - the Spark job (`spark-submit --master local[2] spark_jobs/copy_partitions.py`): `spark_s` is the
    job's own time from its warmed-up executors to the last result, `spark_startup_s` the rest of
    the spark-submit wall time (JVM, session, preflight, Python workers, shutdown);
  - the same job as a client of a Spark Connect server on local[2] that this script starts (own
    ports 25002/24040) before the rounds, whose JVM has started before the timing
    (`connect_spark_s`, `connect_startup_s`);
  - the bare copier, partition after partition in one process (`bare_sequential_s`);
  - the bare copier in a pool of 2 started processes, the parallelism of local[2] (`bare_parallel_s`).
Every copy verifies digests, as the job does. This is done for --rounds rounds (default 5), each
with freshly seeded topics and the ways in a rotated order; times are medians, and
`overhead_ratio` is the median of each round's spark_s / bare_parallel_s (measured side by side, as
the machine's load drifts between rounds), `connect_overhead_ratio` the same for the Connect
server's job, each with `..._interval`: the order statistics that hold the true median ratio with
the probability `..._interval_coverage` (at least 0.9 from 5 rounds on; under 8 rounds it is the
ratios' whole range, 0.94 with 5). `spark_extra_s` is the median of each round's spark_s minus
bare_parallel_s, with its interval: what Spark adds to a copy, which does not grow with the data (a
cost per job and per task), so the ratio falls as partitions grow. With 10 MB partitions
(--records 100000) the pool's whole copy takes about 4 s here, and that cost (a median 0.58 s in
runs 10-11 of the README) is over 10% of it.
The last line is one JSON object.

    python bench/bench_spark.py [--topics 3] [--partitions 4] [--records 300000] [--value-bytes 100] [--rounds 5]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from common import PROJECT_DIR, SOURCE, TARGET, delete_topics, median_interval
from confluent_kafka import Producer
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.model import WorkUnit
from kmigrate_spark.clients import write_clients
from kmigrate.run.copying.plan import build_plan, work_units
from kmigrate.run.targets.prepare import prepare_target_topic
from kmigrate_spark.adapters import ready
from kmigrate_spark.conf import submit_args

PARALLELISM = 2


def seed(topics: list[str], partitions: int, records: int, value_bytes: int) -> None:
    producer = Producer(SOURCE.producer(**{"linger.ms": 20, "batch.size": 1 << 20, "compression.type": "lz4",
                                           "queue.buffering.max.messages": 1_000_000}))
    value = b"v" * value_bytes
    with ClusterAdmin(SOURCE) as admin:
        for topic in topics:
            admin.create_topic(topic, partitions, {})
    for topic in topics:
        for partition in range(partitions):
            for i in range(records):
                while True:
                    try:
                        producer.produce(topic, key=b"key-%08d" % i, value=value, partition=partition)
                        break
                    except BufferError:
                        producer.poll(0.05)
    assert producer.flush(120) == 0


def prepare(topics: list[str]) -> list[WorkUnit]:
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        for topic in topics:
            prepare_target_topic(source, target, topic)
    return work_units(build_plan(SOURCE, topics))


def copy_one(unit: WorkUnit) -> int:
    result = copy_partition(SOURCE, TARGET, unit, CopyOptions(run_id="bench"))
    assert result.digests_equal, unit
    return result.records


def bare_sequential(units: list[WorkUnit]) -> float:
    started = time.monotonic()
    copied = sum(copy_one(unit) for unit in units)
    assert copied == sum(u.end_offset for u in units)
    return time.monotonic() - started


def bare_parallel(units: list[WorkUnit]) -> float:
    # spawned, not forked: a fork of a process holding librdkafka threads can hang. The workers
    # are started and have imported the library before the clock starts, as the Spark job's
    # Python workers have after its warm-up.
    with concurrent.futures.ProcessPoolExecutor(PARALLELISM, mp_context=multiprocessing.get_context("spawn")) as pool:
        assert list(pool.map(ready, range(PARALLELISM))) == ["ready"] * PARALLELISM
        started = time.monotonic()
        copied = sum(pool.map(copy_one, units))
        seconds = time.monotonic() - started
    assert copied == sum(u.end_offset for u in units)
    return seconds


CONNECT_PORTS = ("25002", "24040")  # this script's Spark Connect server (make spark-connect-up: 15002, 14040)
CONNECT_URL = f"sc://127.0.0.1:{CONNECT_PORTS[0]}"


def spark_cluster(state_dir: Path, command: str) -> None:
    result = subprocess.run(
        [sys.executable, str(PROJECT_DIR / "stack" / "spark_cluster.py"), command, "--state-dir", str(state_dir),
         "--connect-master", f"local[{PARALLELISM}]", "--connect-port", CONNECT_PORTS[0],
         "--connect-ui-port", CONNECT_PORTS[1]], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"bench: spark_cluster.py {command} failed:\n{result.stdout}{result.stderr}")


def spark(topics: list[str], workdir: Path, remote: str | None = None) -> tuple[float, float]:
    manifest = Manifest(str(workdir / "state"), "bench")
    manifest.write_once("plan", build_plan(SOURCE, topics))
    clients = write_clients(workdir / "clients.json", SOURCE, TARGET)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    launcher = ([sys.executable] if remote else
                [str(Path(sys.executable).parent / "spark-submit"), "--master", f"local[{PARALLELISM}]",
                 *submit_args({"spark.ui.enabled": "false"})])
    started = time.monotonic()
    result = subprocess.run(
        [*launcher, str(PROJECT_DIR / "spark_jobs" / "copy_partitions.py"),
         "--state-location", str(workdir / "state"), "--run-id", "bench", "--clients", str(clients),
         *(["--remote", remote] if remote else [])],
        capture_output=True, text=True, env=env, cwd=PROJECT_DIR)
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise SystemExit(f"spark job failed:\n{(result.stdout + result.stderr)[-3000:]}")
    [part] = [p for p in manifest.parts() if p.startswith("copy-results/")]
    job = manifest.read(part)
    assert all(r["ok"] and r["digests_equal"] for r in job["rows"])
    return job["seconds"], wall - job["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--records", type=int, default=300_000, help="per partition")
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5, help="rounds of all four ways; medians are reported")
    args = parser.parse_args()
    total = args.topics * args.partitions * args.records
    ways = {
        "spark": lambda topics: _spark_way(topics),
        "connect": lambda topics: _spark_way(topics, CONNECT_URL),
        "seq": lambda topics: (bare_sequential(prepare(topics)), None),
        "pool": lambda topics: (bare_parallel(prepare(topics)), None),
    }
    names = list(ways)
    times: dict[str, list[float]] = {way: [] for way in names}
    startups: dict[str, list[float]] = {"spark": [], "connect": []}
    connect_state = Path(tempfile.mkdtemp(prefix="bench-spark-connect-"))
    spark_cluster(connect_state, "connect-up")  # started, its first query run, before any timing
    try:
        run_rounds(args, names, ways, times, startups, total)
    finally:
        spark_cluster(connect_state, "connect-down")
        shutil.rmtree(connect_state, ignore_errors=True)
    med = {way: statistics.median(values) for way, values in times.items()}
    ratios = [s / p for s, p in zip(times["spark"], times["pool"])]
    connect_ratios = [s / p for s, p in zip(times["connect"], times["pool"])]
    extras = [s - p for s, p in zip(times["spark"], times["pool"])]
    print(json.dumps({
        "records": total, "partitions": args.topics * args.partitions, "value_bytes": args.value_bytes,
        "rounds": args.rounds,
        "spark_s": round(med["spark"], 3), "spark_startup_s": round(statistics.median(startups["spark"]), 3),
        "bare_sequential_s": round(med["seq"], 3), "bare_parallel_s": round(med["pool"], 3),
        "overhead_ratio": round(statistics.median(ratios), 3),
        "overhead_ratios": [round(r, 3) for r in ratios],
        **interval("overhead_ratio", ratios),
        "spark_extra_s": round(statistics.median(extras), 3), **interval("spark_extra_s", extras),
        "connect_spark_s": round(med["connect"], 3),
        "connect_startup_s": round(statistics.median(startups["connect"]), 3),
        "connect_overhead_ratio": round(statistics.median(connect_ratios), 3),
        "connect_overhead_ratios": [round(r, 3) for r in connect_ratios],
        **interval("connect_overhead_ratio", connect_ratios),
        "spark_records_per_s": round(total / med["spark"]), "bare_parallel_records_per_s": round(total / med["pool"]),
    }))


def interval(name: str, values: list[float]) -> dict[str, object]:
    """The median's distribution-free interval of at least 90% (common.median_interval)."""
    low, high, coverage = median_interval(values)
    return {f"{name}_interval": [round(low, 3), round(high, 3)], f"{name}_interval_coverage": round(coverage, 3)}


def run_rounds(args: argparse.Namespace, names: list[str], ways: dict, times: dict[str, list[float]],
               startups: dict[str, list[float]], total: int) -> None:
    for round_ in range(args.rounds):
        run = uuid.uuid4().hex[:6]
        sets = {way: [f"bench.spark.{run}.{way}.{i}" for i in range(args.topics)] for way in names}
        print(f"round {round_ + 1}/{args.rounds}: seeding {len(sets)} x {args.topics} topics x {args.partitions} "
              f"partitions x {args.records} records of {args.value_bytes} B ({total} records per copy)", flush=True)
        # interleaved, one topic of each way after the other, so that no way gets the first (colder,
        # smaller-batched) or the last (freshest) data: measured, that alone moved a way's time by 30%
        seed([topic for group in zip(*sets.values()) for topic in group], args.partitions, args.records,
             args.value_bytes)
        order = names[round_ % len(names):] + names[:round_ % len(names)]  # each way goes first in turn
        try:
            for way in order:
                seconds, startup = ways[way](sets[way])
                times[way].append(seconds)
                if startup is not None:
                    startups[way].append(startup)
                print(f"  {LABELS[way]}: {seconds:.2f}s" + (f" (+{startup:.2f}s start-up and preflight)" if startup else ""),
                      flush=True)
        finally:
            for cluster in (SOURCE, TARGET):  # a benchmark leaves no data behind
                delete_topics(cluster, [t for topics in sets.values() for t in topics])


LABELS = {"spark": f"spark job, local[{PARALLELISM}]",
          "connect": f"spark job on the Spark Connect server, local[{PARALLELISM}]",
          "seq": "bare copier, one partition after another", "pool": f"bare copier, {PARALLELISM} processes"}


def _spark_way(topics: list[str], remote: str | None = None) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as workdir:
        return spark(topics, Path(workdir), remote)


if __name__ == "__main__":
    main()
