"""Many small partitions: this project against MirrorMaker 2, and this project's growth with the
partition count (`make bench-scale`).

One run on the local stack: two workloads of the same shape are seeded on the source, N partitions
(default 2,000 over 40 topics) and N/4 (over a quarter of the topics); each partition holds 100 to
1,000 records of 100 B, a tenth of them none; 8 consumer groups are committed at random positions on
the large one. Then
  1. MirrorMaker 2 (as bench_mm2.py runs it, on the target's Connect worker) replicates the N
     partitions until every record is on the target and the groups' offsets have stopped moving;
     the target is reset;
  2. this project migrates the N partitions: snapshot, the copy job, the verify job, the group
     replication, its jobs on the project's Spark Connect server (started before the timing, as
     MM2's Connect worker runs before its connectors are created);
  3. this project migrates the N/4 partitions the same way.
Each target is read back record by record. The last line printed is one JSON object: partitions,
ours_s (snapshot to groups replicated, the verification included), mm2_s (to every record and group
offset on the target), speedup_vs_mm2, growth (ours at N / ours at N/4: linear is 4.0),
per_partition_ms (ours_s / N), ours_offsets_equal_pct, ours_groups_exact, and the phases.

    python bench/bench_scale.py [--partitions 2000] [--topics 40] [--groups 8] [--mm2-tasks 4]
                                [--spark-master 'local[2]'] [--no-mm2] [--no-docs] [--keep | --reuse PREFIX]

MirrorMaker 2 that moves no record for --mm2-stall-s (default 300 s) has failed: its outcome is
the worker's own complaint, `mm2_error` in the last line. BROKERS=2 (`make bench-scale BROKERS=2`)
runs on the stack's multi-broker profile, one replica a partition.
"""
from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from common import (
    BROKERS,
    PROJECT_DIR,
    SOURCE,
    TARGET,
    Result,
    Workload,
    cleanup,
    cluster_broker_pids,
    commit_at,
    create_spread,
    delete_groups,
    delete_topics,
    process_cpu_s,
    read_all,
    send,
    target_offsets,
    versions,
    wait_until_settled,
    write_docs,
)
from confluent_kafka import Producer
from kmigrate.claims.runs import release_topics
from kmigrate.kafka.admin import ClusterAdmin
from mm2 import reset_target, run_mm2
from ours import RUN_ID, run_ours, spark_cluster, spark_connect_up

MARKER_START, MARKER_END = "<!-- bench-scale:start -->", "<!-- bench-scale:end -->"
# a run of 10,000 partitions or more has its own section beside the default's
LARGE_START, LARGE_END = "<!-- bench-scale-large:start -->", "<!-- bench-scale-large:end -->"


def seed(prefix: str, topics: int, partitions: int, rng: random.Random, value_bytes: int) -> Workload:
    """`partitions` over `topics` topics, each partition 100 to 1,000 records or (a tenth) none."""
    counts = create_spread([f"{prefix}.t{i:03d}" for i in range(topics)], partitions)
    producer = Producer(SOURCE.producer(**{"linger.ms": 20, "batch.size": 256 << 10,
                                           "queue.buffering.max.messages": 1_000_000}))
    produced = 0
    for topic, n in counts.items():
        for p in range(n):
            records = 0 if rng.random() < 0.1 else rng.randint(100, 1000)
            for i in range(records):
                send(producer, topic, p, b"k%d" % i, b"%s:%d:%d:" % (topic.encode(), p, i) + rng.randbytes(value_bytes - 24))
            produced += records
    if producer.flush(300):
        raise SystemExit("bench: records left undelivered while seeding")
    return Workload(prefix, counts, {}, produced)


def seeded(prefix: str, topics: int, partitions: int, groups: int) -> Workload:
    """A workload an earlier run seeded and kept (`--keep`), read back from the source: its topics'
    partition counts and its groups' committed offsets."""
    names = [f"{prefix}.t{i:03d}" for i in range(topics)]
    with ClusterAdmin(SOURCE) as admin:
        counts = admin.partition_counts(names)
        committed = {f"{prefix}.g{g}": admin.committed_offsets(f"{prefix}.g{g}") for g in range(groups)}
    if sum(counts.values()) != partitions:
        raise SystemExit(f"bench: {prefix}.* holds {sum(counts.values()):,} partitions, not {partitions:,}")
    return Workload(prefix, counts, {g: o for g, o in committed.items() if o})


def commit_groups(w: Workload, count: int, rng: random.Random) -> None:
    """`count` groups, each on a few topics at random positions."""
    topics = sorted(w.partitions)
    with ClusterAdmin(SOURCE) as admin:
        for g in range(count):
            group = f"{w.prefix}.g{g}"
            chosen = [topics[(g * 5 + k) % len(topics)] for k in range(3)]
            marks = admin.watermarks_of((t, p) for t in chosen for p in range(w.partitions[t]))
            positions = {tp: rng.randint(low, high) for tp, (low, high) in marks.items()}
            commit_at(group, positions)
            w.groups[group] = positions


def groups_exact(w: Workload) -> int:
    """Groups whose committed offsets on the target equal the source's, partition for partition."""
    on_target = target_offsets(w.groups)
    with ClusterAdmin(SOURCE) as admin:
        return sum(1 for g in w.groups if on_target.get(g) and on_target[g] == {
            tp: o for tp, o in admin.committed_offsets(g).items() if tp[0] in w.partitions})


def ours(w: Workload, args: argparse.Namespace, server: Any) -> tuple[Result, float, int, float]:
    """This project's migration of `w`; (result, seconds from snapshot to groups replicated with the
    verification included, groups exact, the target brokers' CPU seconds meanwhile: making the target
    topics' partitions is theirs), once the target broker is done with the deletions of the step before
    (as MM2 starts on a target that deleted nothing recently). The target is reset after it."""
    waited = wait_until_settled(TARGET)
    print(f"  (the target broker settled after the previous step's deletions in {waited:.0f}s)", flush=True)
    release_topics(TARGET, RUN_ID, deployment=None, force=True)  # a run of the workload before that failed
    brokers = cluster_broker_pids("target")
    try:
        before = sum(process_cpu_s(pid) for pid in brokers)
        with tempfile.TemporaryDirectory() as workdir:
            result = run_ours(w, args, Path(workdir), server, verify_after=True)  # as the migration DAG runs it
        brokers_cpu_s = sum(process_cpu_s(pid) for pid in brokers) - before
        total = result.groups_s + (result.verify_s or 0.0)
        exact = groups_exact(w) if w.groups else 0
    finally:  # the run's claims on its topics go with them (a report would release them)
        release_topics(TARGET, RUN_ID, deployment=None, force=True)
        reset_target(w)
    return result, total, exact, brokers_cpu_s


def markdown(summary: dict[str, Any], info: dict[str, str], args: argparse.Namespace, mm2: dict[str, Any] | None,
             ours_row: dict[str, Any]) -> str:
    n, q = summary["partitions"], summary["quarter_partitions"]
    job_start = round(summary["ours_copy_job_s"] - (ours_row["copy_phase_s"] or 0), 1)
    large = n >= 10_000
    per_partition = 3 if large else 15
    targets = {**({} if large else {"speedup_vs_mm2 >= 2": summary["speedup_vs_mm2"] is not None
                                    and summary["speedup_vs_mm2"] >= 2}),
               "growth <= 4.5": summary["growth"] <= 4.5,
               f"per_partition_ms <= {per_partition}": summary["per_partition_ms"] <= per_partition,
               "every partition equal": summary["ours_offsets_equal_pct"] == 100.0}
    mm2_outcome = ("not run" if mm2 is None else f"failed: {summary['mm2_error']}" if summary.get("mm2_error")
                   else f"{summary['mm2_s']} s")

    failed = summary.get("mm2_error")

    def side(key: str, fmt: str = "{}") -> str:
        if failed:
            return "failed (below)"
        return "not run" if mm2 is None or mm2.get(key) is None else fmt.format(mm2[key])

    brokers = "one broker a cluster" if BROKERS == 1 else f"{BROKERS} brokers a cluster, one replica a partition"
    return "\n".join([
        LARGE_START if large else MARKER_START,
        f"## {'Tens of thousands of' if large else 'Many small'} partitions against MirrorMaker 2 (`make bench-scale`)",
        "",
        f"{info['machine']}; Kafka {info['kafka']} ({brokers}), PySpark {info['pyspark']}. Workload: "
        f"{n:,} partitions over {args.topics} topics, 100-1,000 records of {args.value_bytes} B each, a tenth of the "
        f"partitions empty, {args.groups} consumer groups on 3 topics each. Ours as the migration DAG runs it, on "
        f"the project's Spark Connect server ({args.spark_master}): snapshot, one copy job that creates the target "
        "topics, copies and then verifies every record of every partition on both sides, group replication. MM2: "
        f"MirrorSourceConnector ({args.mm2_tasks} tasks) and MirrorCheckpointConnector on the target's Connect "
        "worker (heap 512 MB, as the stack runs it), until every record is on the target and the synced group offsets have stopped moving. Then ours "
        f"alone at {q:,} partitions of the same shape, for the growth. One run, side by side:",
        "",
        "| measure | MirrorMaker 2 | kmigrate |",
        "| --- | --- | --- |",
        f"| every record on the target | {side('replicate_s', '{} s')} | {ours_row['replicate_s']} s (snapshot "
        f"{summary['ours_snapshot_s']} s, job start and target topics {job_start} s, copying "
        f"{ours_row['copy_phase_s']} s) |",
        f"| verification | none | {summary['ours_verify_s']} s |",
        f"| group offsets on the target | {side('groups_s', '{} s')}, "
        f"{side('partitions_without_group_offset')} of the groups' partitions without an offset | "
        f"{summary['ours_groups_s']} s after the copy job, all |",
        f"| total | {side('total_s', '{} s')} | {summary['ours_s']} s ({summary['per_partition_ms']} ms a partition) |",
        f"| offsets equal | {side('offsets_equal_pct', '{} %')} | {summary['ours_offsets_equal_pct']} % |",
        f"| duplicates a switched-over consumer reads | {side('duplicates', '{:,}')} | {summary['ours_duplicates']:,} |",
        f"| groups exact | | {summary['ours_groups_exact']} of {summary['groups']} |",
        f"| CPU seconds (MM2 worker; our copy job) | {'not run' if mm2 is None else mm2['cpu_s']} | {ours_row['cpu_s']} |",
        f"| CPU seconds of the target brokers (ours: making the partitions, taking the copy, serving the verification) "
        f"| | {summary['target_brokers_cpu_s']} |",
        "",
        f"MirrorMaker 2: {mm2_outcome}. `speedup_vs_mm2` "
        f"{summary['speedup_vs_mm2'] if summary['speedup_vs_mm2'] is not None else 'none (MM2 did not finish)'}; at {q:,} partitions {summary['quarter_s']} s, `growth` "
        f"{summary['growth']} (linear is 4.0). Targets: "
        + ", ".join(f"{name} {'met' if ok else 'NOT met'}" for name, ok in targets.items()) + ".",
        "",
        "```json",
        json.dumps(summary),
        "```",
        "",
        LARGE_END if large else MARKER_END,
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--topics", type=int, default=40)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--mm2-tasks", type=int, default=4)
    parser.add_argument("--spark-master", default="local[2]")
    parser.add_argument("--timeout-s", type=float, default=1800, help="longest wait for MM2 to replicate")
    parser.add_argument("--group-sync-timeout-s", type=float, default=300)
    parser.add_argument("--mm2-stall-s", type=float, default=300,
                        help="MM2 has failed when no record has reached the target for this long")
    parser.add_argument("--no-mm2", action="store_true", help="this project only (no speedup)")
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/BENCHMARKS.md")
    parser.add_argument("--keep", action="store_true",
                        help="leave the seeded workload on the source (its prefix printed) for --reuse")
    parser.add_argument("--reuse", metavar="PREFIX", help="the workload a --keep run left (same --partitions, "
                                                          "--topics, --groups), not seeded again")
    args = parser.parse_args()
    rng = random.Random(23)
    prefix = args.reuse or f"scale{uuid.uuid4().hex[:6]}"
    info = versions()
    print(f"bench-scale: {info['machine']}; topics {prefix}*", flush=True)
    server = spark_connect_up(args.spark_master)
    quarter_topics = max(1, args.topics // 4)
    large = small = None
    try:
        began = time.monotonic()
        if args.reuse:
            large = seeded(f"{prefix}n", args.topics, args.partitions, args.groups)
            small = seeded(f"{prefix}q", quarter_topics, args.partitions // 4, 0)
        else:
            large = seed(f"{prefix}n", args.topics, args.partitions, rng, args.value_bytes)
            small = seed(f"{prefix}q", quarter_topics, args.partitions // 4, rng, args.value_bytes)
            commit_groups(large, args.groups, rng)
        large.source, small.source = read_all(SOURCE, large.partitions), read_all(SOURCE, small.partitions)
        print(f"seeded {sum(large.partitions.values()):,} partitions ({large.records:,} records) and "
              f"{sum(small.partitions.values()):,} ({small.records:,}) in {time.monotonic() - began:.0f}s", flush=True)
        mm2_s, mm2_row, mm2_error = None, None, None
        if not args.no_mm2:
            print("MirrorMaker 2 ...", flush=True)
            mm2 = run_mm2(large, args)
            mm2_error = mm2.error
            mm2_s = None if mm2.error else max(mm2.replicate_s, mm2.groups_s)
            mm2_row = {**mm2.row(large), "total_s": None if mm2_s is None else round(mm2_s, 1)}
            print(f"  MM2: {'failed' if mm2.error else f'{mm2_s:.1f}s'} ({json.dumps(mm2.row(large))})", flush=True)
            reset_target(large)
        print(f"kmigrate, {sum(large.partitions.values()):,} partitions ...", flush=True)
        at_n, ours_s, exact, brokers_cpu_s = ours(large, args, server)
        print(f"  ours: {ours_s:.1f}s ({json.dumps(at_n.row(large))})", flush=True)
        print(f"kmigrate, {sum(small.partitions.values()):,} partitions ...", flush=True)
        at_quarter, quarter_s, _, _ = ours(small, args, server)
        print(f"  ours: {quarter_s:.1f}s ({json.dumps(at_quarter.row(small))})", flush=True)
    finally:
        for w in (large, small):
            if w is not None and not args.keep:
                cleanup(w)
            elif w is not None:  # the target's copy goes; the source's workload stays for --reuse
                delete_topics(TARGET, w.partitions)
                delete_groups(TARGET, w.groups)
        if args.keep:
            print(f"bench: the source workload kept: --reuse {prefix}", flush=True)
        if server.started:
            spark_cluster("connect-down")
    n = sum(large.partitions.values())
    row = at_n.row(large)
    summary = {
        "partitions": n, "quarter_partitions": sum(small.partitions.values()),
        "ours_s": round(ours_s, 1), "mm2_s": None if mm2_s is None else round(mm2_s, 1),
        "speedup_vs_mm2": None if mm2_s is None else round(mm2_s / ours_s, 2),
        "growth": round(ours_s / quarter_s, 2), "per_partition_ms": round(1000 * ours_s / n, 1),
        "ours_offsets_equal_pct": row["offsets_equal_pct"], "ours_groups_exact": exact, "groups": len(large.groups),
        "ours_snapshot_s": row["snapshot_s"], "ours_copy_job_s": round(at_n.replicate_s - (at_n.snapshot_s or 0), 1),
        "ours_copy_phase_s": row["copy_phase_s"], "ours_verify_s": row["verify_s"],
        "ours_groups_s": round(at_n.groups_s - at_n.replicate_s, 1), "quarter_s": round(quarter_s, 1),
        "ours_duplicates": at_n.duplicates, "ours_missing": at_n.missing,
        "driver_peak_rss_mb": row["peak_rss_mb"], "target_brokers_cpu_s": round(brokers_cpu_s, 1),
        "copy_job_cpu_s": row["cpu_s"],
        **({"mm2_error": mm2_error} if mm2_error else {}),
    }
    if not args.no_docs:
        markers = (LARGE_START, LARGE_END) if n >= 10_000 else (MARKER_START, MARKER_END)
        write_docs(markdown(summary, info, args, mm2_row, row), PROJECT_DIR / "docs" / "BENCHMARKS.md", *markers)
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
