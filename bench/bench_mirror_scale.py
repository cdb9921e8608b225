"""make bench-mirror-scale: the continuous mirror over many idle partitions and a few busy ones.

One run on the local stack: --idle-partitions (default 10,000, over --idle-topics 100 topics) each
given 5 records and then left alone, beside bench-dr's load (dr_load.Load: 24 partitions, --rate-mb
MB/s of 1 KiB values, two groups consuming). The mirror job (spark_jobs/mirror.py, as the DR DAG
starts it) runs on the project's Spark Connect server with its shipped settings (a status every
second) and selects all of them. Measured:
  1. in step: from the mirror's start (its DR topics created) until a status shows every partition
     at the source's end;
  2. idle: --idle-s with no writes at all: the CPU of the mirror (its driver, the Spark Connect
     server and its Python workers) and of the source's brokers, and the statuses written;
  3. busy: --seconds of the load: each 10th record of the 20-partition plain topic timed from its
     acknowledgement on the source to the DR cluster's end passing it (read every 0.1 s; the first
     10 s left out), the mirror's CPU meanwhile, and the statuses written;
  4. the fetch sessions: the Fetches the tasks sent and how many named every partition (a session
     opened or lost), from the tasks' reports.
The last line is one JSON object: rpo_p50_s, rpo_p99_s, rpo_max_s, idle_cpu_pct (of one core),
busy_cpu_pct, status_every_s (idle and busy), in_step_s, fetches, fetches_in_full.

    python bench/bench_mirror_scale.py [--idle-partitions 10000] [--idle-topics 100] [--rate-mb 5]
                                       [--seconds 120] [--idle-s 60] [--no-docs]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    BROKERS,
    PROJECT_DIR,
    SOURCE,
    TARGET,
    TreeSampler,
    create_spread,
    delete_groups,
    delete_topics,
    poll,
    versions,
    write_docs,
)
from confluent_kafka import Producer  # noqa: E402
from dr_load import Load, Watcher, latencies, percentile  # noqa: E402
from kmigrate.manifest import Manifest  # noqa: E402
from kmigrate.run.mirror import reports  # noqa: E402
from kmigrate.run.mirror import status as mirror_status  # noqa: E402
from kmigrate.run.mirror.term import request_stop  # noqa: E402
from kmigrate_spark.clients import write_clients  # noqa: E402
from mm2 import stack_pid  # noqa: E402
from ours import spark_cluster, spark_connect_up  # noqa: E402

MARKER_START, MARKER_END = "<!-- bench-mirror-scale:start -->", "<!-- bench-mirror-scale:end -->"
WARM_S = 10.0


def seed_idle(prefix: str, topics: int, partitions: int) -> dict[str, int]:
    counts = create_spread([f"{prefix}.idle{i:03d}" for i in range(topics)], partitions)
    producer = Producer(SOURCE.producer(**{"linger.ms": 20, "queue.buffering.max.messages": 1_000_000}))
    for topic, n in counts.items():
        for p in range(n):
            for i in range(5):
                producer.produce(topic, b"idle %d" % i, partition=p)
        producer.poll(0)
    if producer.flush(300):
        raise SystemExit("bench: idle records left undelivered")
    return counts


def broker_roots(side: str) -> list[int]:
    names = [f"{side}-kafka"] if BROKERS == 1 else [f"{side}-kafka-{n}" for n in range(1, BROKERS + 1)]
    return [stack_pid(name) for name in names]


def statuses(manifest: Manifest, seconds: float) -> tuple[int, list[float]]:
    """The statuses the mirror wrote within `seconds` from now: their count, and each one's round_s."""
    first = (mirror_status.read(manifest) or {}).get("round", 0)
    took, deadline, seen = [], time.monotonic() + seconds, first
    while time.monotonic() < deadline:
        status = mirror_status.read(manifest) or {}
        if status.get("round", 0) > seen:
            seen = status["round"]
            took.append(status["round_s"])
        time.sleep(0.2)
    return seen - first, took


def fetch_counts(manifest: Manifest) -> tuple[int, int]:
    """The Fetches of the running term's tasks so far, and those that named every partition."""
    fetches = in_full = 0
    for part in manifest.parts():
        if part.startswith(f"{reports.REPORTS}/"):
            counts = (manifest.read(part) or {}).get("fetches") or {}
            fetches += counts.get("sent", 0)
            in_full += counts.get("in_full", 0)
    return fetches, in_full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--idle-partitions", type=int, default=10_000)
    parser.add_argument("--idle-topics", type=int, default=100)
    parser.add_argument("--rate-mb", type=float, default=5.0)
    parser.add_argument("--value-bytes", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=120.0, help="the busy phase")
    parser.add_argument("--idle-s", type=float, default=60.0, help="the idle phase")
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--in-step-timeout-s", type=float, default=900.0)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    info = versions()
    prefix = f"mscale{uuid.uuid4().hex[:6]}"
    print(f"bench-mirror-scale: {info['machine']}; topics {prefix}.*", flush=True)
    load = Load(prefix, args.rate_mb, args.value_bytes)
    idle: dict[str, int] = {}
    server = spark_connect_up(args.spark_master)
    mirror = None
    workdir = Path(tempfile.mkdtemp(prefix="bench-mirror-scale-"))
    try:
        began = time.monotonic()
        idle = seed_idle(prefix, args.idle_topics, args.idle_partitions)
        load.create()
        load.warm_up()
        print(f"seeded {args.idle_partitions:,} idle partitions and the load's 24 in {time.monotonic() - began:.0f}s",
              flush=True)
        state, run_id = workdir / "state", "bench-mirror-scale"
        clients = write_clients(workdir / "clients.json", SOURCE, TARGET)
        manifest = Manifest(str(state), run_id)
        log = workdir / "mirror.log"
        started = time.monotonic()
        with log.open("w") as out:
            mirror = subprocess.Popen(
                [sys.executable, str(PROJECT_DIR / "spark_jobs" / "mirror.py"), "--state-location", str(state),
                 "--run-id", run_id, "--clients", str(clients), "--remote", server.url,
                 "--topics", re.escape(prefix) + r"\..*", "--groups", re.escape(prefix) + r"\.readers-.*"],
                stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT_DIR)
        total = args.idle_partitions + len(load.partitions())

        def in_step() -> bool:
            if mirror.poll() is not None:
                raise SystemExit(f"bench: the mirror exited {mirror.returncode}:\n{log.read_text()[-4000:]}")
            status = mirror_status.read(manifest) or {}
            return (len(status.get("partitions", ())) == total and status["behind_records"] == 0
                    and not status["failed_partitions"])

        poll(in_step, f"the mirror in step with {total:,} partitions", args.in_step_timeout_s, every_s=1.0)
        in_step_s = time.monotonic() - started
        print(f"the mirror in step with {total:,} partitions after {in_step_s:.1f}s", flush=True)

        roots = lambda: [mirror.pid, server.pid]  # noqa: E731 - the driver, the server and its workers
        sources = broker_roots("source")
        with TreeSampler(roots) as ours, TreeSampler(lambda: sources) as brokers:
            idle_rounds, idle_took = statuses(manifest, args.idle_s)
        idle_cpu = {"mirror": 100 * ours.cpu_s / args.idle_s, "source_brokers": 100 * brokers.cpu_s / args.idle_s}
        fetches_before = fetch_counts(manifest)
        print(f"idle {args.idle_s:.0f}s: mirror {idle_cpu['mirror']:.0f}% of a core, source brokers "
              f"{idle_cpu['source_brokers']:.0f}%, {idle_rounds} statuses (round_s median "
              f"{percentile(idle_took, 0.5)})", flush=True)

        watcher = Watcher({"ours": load.plain})
        watcher.start()
        load_began = time.time()
        with TreeSampler(roots) as ours, TreeSampler(lambda: sources) as brokers:
            load.start()
            busy_rounds, busy_took = statuses(manifest, args.seconds)
            load.stop()
        time.sleep(2.0)  # the last records' way to the DR cluster, sampled by the watcher
        watcher.stopping.set()
        watcher.join()
        busy_cpu = {"mirror": 100 * ours.cpu_s / args.seconds, "source_brokers": 100 * brokers.cpu_s / args.seconds}
        waits = latencies(load.acked, watcher.samples, "ours", after=load_began + WARM_S)
        windows = [percentile(latencies([a for a in load.acked if at <= a[2] < at + 10], watcher.samples, "ours"), 0.99)
                   for at in range(int(load_began + WARM_S), int(load_began + args.seconds), 10)]
        print(f"busy p99 by 10 s window: {windows}", flush=True)
        fetches, in_full = fetch_counts(manifest)
        request_stop(manifest, "the benchmark is done")
        mirror.wait(120)
    finally:
        if mirror is not None and mirror.poll() is None:
            mirror.kill()
        load.stopping.set()
        topics = [*idle, load.plain, load.tx, load.compact]
        for cluster in (SOURCE, TARGET):
            delete_topics(cluster, topics)
            delete_groups(cluster, load.groups)
        if server.started:
            spark_cluster("connect-down")
    summary = {
        "idle_partitions": args.idle_partitions, "busy_partitions": len(load.partitions()), "rate_mb": args.rate_mb,
        "in_step_s": round(in_step_s, 1),
        "rpo_p50_s": percentile(waits, 0.5), "rpo_p99_s": percentile(waits, 0.99), "rpo_max_s": percentile(waits, 1.0),
        "records_timed": len(waits), "rpo_p99_by_10s": windows,
        "idle_cpu_pct": round(idle_cpu["mirror"]), "idle_source_brokers_cpu_pct": round(idle_cpu["source_brokers"]),
        "busy_cpu_pct": round(busy_cpu["mirror"]), "busy_source_brokers_cpu_pct": round(busy_cpu["source_brokers"]),
        "idle_status_every_s": round(args.idle_s / max(1, idle_rounds), 2),
        "busy_status_every_s": round(args.seconds / max(1, busy_rounds), 2),
        "idle_round_s_p50": percentile(idle_took, 0.5), "busy_round_s_p50": percentile(busy_took, 0.5),
        "fetches": fetches, "fetches_in_full": in_full,
        "fetches_while_idle": fetches_before[0], "fetches_in_full_while_idle": fetches_before[1],
    }
    if not args.no_docs:
        write_docs(markdown(summary, info, args), PROJECT_DIR / "docs" / "BENCHMARKS.md", MARKER_START, MARKER_END)
    print(json.dumps(summary), flush=True)


def markdown(s: dict, info: dict[str, str], args: argparse.Namespace) -> str:
    brokers = "one broker a cluster" if BROKERS == 1 else f"{BROKERS} brokers a cluster"
    met = s["rpo_p99_s"] is not None and s["rpo_p99_s"] <= 1.0
    return "\n".join([
        MARKER_START,
        "## The mirror over many idle partitions (`make bench-mirror-scale`)",
        "",
        f"{info['machine']}; Kafka {info['kafka']} ({brokers}), PySpark {info['pyspark']}. The mirror job on the "
        f"project's Spark Connect server ({args.spark_master}), shipped settings (a status every second), over "
        f"{s['idle_partitions']:,} partitions that hold 5 records each and receive nothing, and bench-dr's load on "
        f"{s['busy_partitions']} partitions at {s['rate_mb']} MB/s of {args.value_bytes} B values. One run:",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| mirror start to every partition in step (DR topics created, first copies) | {s['in_step_s']} s |",
        f"| busy partitions: acknowledged on the source to on the DR cluster, p50 / p99 / max "
        f"({s['records_timed']:,} records timed) | {s['rpo_p50_s']} / {s['rpo_p99_s']} / {s['rpo_max_s']} s |",
        f"| mirror CPU (driver, Spark Connect server, Python workers), all idle, {args.idle_s:.0f} s | "
        f"{s['idle_cpu_pct']} % of a core (source brokers {s['idle_source_brokers_cpu_pct']} %) |",
        f"| mirror CPU under the load, {args.seconds:.0f} s | {s['busy_cpu_pct']} % of a core (source brokers "
        f"{s['busy_source_brokers_cpu_pct']} %) |",
        f"| a status every (asked: 1 s), idle / busy | {s['idle_status_every_s']} / {s['busy_status_every_s']} s "
        f"(a status's own reading, median: {s['idle_round_s_p50']} / {s['busy_round_s_p50']} s) |",
        f"| Fetches the tasks sent, and those naming every partition (a fetch session opened or lost) | "
        f"{s['fetches']:,}, {s['fetches_in_full']:,} (idle phase's end: {s['fetches_while_idle']:,}, "
        f"{s['fetches_in_full_while_idle']:,}) |",
        "",
        f"Target: RPO p99 of the busy partitions <= 1 s {'met' if met else 'NOT met'}.",
        "",
        "```json",
        json.dumps(s),
        "```",
        "",
        MARKER_END,
    ])


if __name__ == "__main__":
    main()
