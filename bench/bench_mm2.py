"""This project's copy against Apache Kafka's MirrorMaker 2, side by side on the local stack
(`make bench-mm2`).

One run: first a warm-up (--warm-up-records, 100,000 records of the same shape through every tool,
untimed, then deleted), so that no tool pays for brokers fresh from `make stack-up` compiling their
code; then a workload is seeded on the source (default 6 topics x 4 partitions holding 1,000,000
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
                              [--value-bytes 512] [--groups 8] [--mm2-tasks 4] [--warm-up-records 100000]
                              [--quick] [--no-docs]
                              [--ours both|spark-submit|connect] [--spark-master 'local[4]']
"""
from __future__ import annotations

import argparse
import datetime
import json
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import (
    PROJECT_DIR,
    SOURCE,
    Result,
    Workload,
    cleanup,
    commit_at,
    read_all,
    read_partition,
    send,
    versions,
    write_docs,
)
from confluent_kafka import Producer
from kmigrate.kafka.admin import ClusterAdmin
from mm2 import CLIENT_SETTINGS, reset_target, run_mm2
from ours import SparkConnectServer, run_ours, spark_cluster, spark_connect_up

MARKER_START, MARKER_END = "<!-- bench-mm2:start -->", "<!-- bench-mm2:end -->"


# ---------------------------------------------------------------------------------- workload

def _value(pool: bytes, topic_index: int, partition: int, i: int, size: int) -> bytes:
    head = b"%d:%d:%d:" % (topic_index, partition, i)
    start = (i * 7919 + partition * 104729) % (len(pool) - size)
    return head + pool[start:start + size - len(head)]


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
                send(producer, topic, p, b"k%d" % i, _value(pool, index, p, i, args.value_bytes))
            produced += per_partition
    side = args.side_records // 2
    keys = max(1, side // 4)  # every key written about four times: the cleaner removes most
    for p in range(2):
        for i in range(side):
            send(producer, compacted, p, b"key-%d" % (i % keys), _value(pool, 100, p, i, args.value_bytes))
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
                send(txp, txn, p, b"t%d" % i, _value(pool, 101, p, i, args.value_bytes))
        if (start // batch) % 4 == 3:
            txp.flush(60)  # sent before the abort, so that aborted records stay in the log
            txp.abort_transaction(60)
        else:
            txp.commit_transaction(60)
        produced += 2 * (min(side, start + batch) - start)
    return Workload(prefix, partitions, {}, produced)


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


# ---------------------------------------------------------------------------------- reporting

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
        "- kmigrate: snapshot of topics and groups, then spark_jobs/drill_copy.py (as the DR drill DAG "
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
        f"- Before the timing, {args.warm_up_records:,} records (the same shape) went through MM2 and each of our "
        "ways, untimed, then were deleted: brokers fresh from `make stack-up` compile the code that carries "
        "the copies while they carry the first ones, as a production cluster's brokers have long done.",
        "- MM2 ran first, then the target was reset (connectors, topics, internal topics, groups deleted) before "
        "each kmigrate run; the source was not touched between them (it was written just before MM2 ran, so "
        "all of them read it from the page cache).",
    ]
    lines += [f"- Note: {n}" for n in notes]
    lines += ["", f"Last line of the run: `{json.dumps(summary)}`", MARKER_END]
    return "\n".join(lines) + "\n"


def prepared(prefix: str, args: argparse.Namespace) -> Workload:
    """The workload seeded, its compacted topic cleaned, its groups committed, the source read back."""
    w = seed(prefix, args)
    wait_for_compaction(w, args.side_records // 2 * 2, 90)
    commit_groups(w, args.groups)
    w.source = read_all(SOURCE, w.partitions)
    return w


def every_tool(w: Workload, args: argparse.Namespace, ways: list[str],
               server: SparkConnectServer | None) -> list[Result]:
    """MM2, then each of our ways, the target reset before each of ours."""
    print("MirrorMaker 2 ...", flush=True)
    results = [run_mm2(w, args)]
    for way in ways:
        reset_target(w)
        print(f"kmigrate ({way}) ...", flush=True)
        with tempfile.TemporaryDirectory() as workdir:
            results.append(run_ours(w, args, Path(workdir), server if way == "connect" else None))
    return results


def warm_up(prefix: str, args: argparse.Namespace, ways: list[str], server: SparkConnectServer | None) -> None:
    """A small workload (--warm-up-records) through MM2 and each of our ways, untimed, then deleted:
    the brokers, the Connect worker and the Spark Connect server compile the code both tools use
    (measured on a fresh stack: our copy phase took 6.4 s on cold brokers, 2.5-4.0 s once they had
    carried three copies), as a production cluster's brokers have before a migration."""
    small = argparse.Namespace(**{**vars(args), "records": args.warm_up_records,
                                  "side_records": max(2, args.warm_up_records // 20), "groups": 2})
    began = time.monotonic()
    w = prepared(prefix, small)
    try:
        every_tool(w, small, ways, server)
        reset_target(w)
    finally:
        cleanup(w)
    print(f"warm-up: {w.records:,} records through every tool in {time.monotonic() - began:.0f}s, untimed",
          flush=True)


def measure(prefix: str, args: argparse.Namespace, ways: list[str],
            server: SparkConnectServer | None) -> tuple[list[Result], Workload]:
    """Warm up, seed, run MM2, then each of our ways; the topics are deleted at the end."""
    if args.warm_up_records:
        warm_up(f"{prefix}w", args, ways, server)
    seeded = time.monotonic()
    w = prepared(prefix, args)
    print(f"seeded {w.produced:,} records ({w.records:,} visible, {w.bytes / 1e6:,.0f} MB of values, "
          f"{w.compacted_away:,} compacted away) and {len(w.groups)} groups in {time.monotonic() - seeded:.0f}s", flush=True)
    try:
        results = every_tool(w, args, ways, server)
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
    parser.add_argument("--warm-up-records", type=int, default=100_000,
                        help="records through every tool before the timing, untimed (0: none)")
    parser.add_argument("--quick", action="store_true", help="a small run: 100,000 records, 5,000 per side topic")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/BENCHMARKS.md and the chart")
    args = parser.parse_args()
    if args.quick:
        args.records, args.side_records = 100_000, 5_000
        args.warm_up_records = min(args.warm_up_records, 10_000)
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
