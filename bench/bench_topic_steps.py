"""The cutover window's steps on the target topics at many topics (`make bench-topic-steps`).

Inside the window a migration checks what the source changed on its topics since the pre-copy
(`reconcile_target_topics`, at the snapshot) and, after the verification, puts back the settings the
copy set on every target topic (`restore_topic_configs`). Both grow with the number of topics. This
creates `--topics` one-partition topics on both clusters (each with a setting of its own on the
source, and the copy's settings on the target, as a copy leaves them), then runs both steps twice,
side by side in one run, alternating: one topic at a time (as the steps ran before: their requests
for each topic in turn) and all topics together (as they run now: one DescribeConfigs a cluster and
IncrementalAlterConfigs in requests the controller takes). Each restore starts from the copy's
settings. The last line is one JSON object.

    python bench/bench_topic_steps.py [--topics 400] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid

from common import PROJECT_DIR, SOURCE, TARGET, delete_topics, versions, write_docs
from confluent_kafka.admin import AdminClient, NewTopic
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.targets.prepare import (
    COPY_SETTINGS,
    reconcile_target_topic,
    reconcile_topics,
    restore_target_topic,
    restore_target_topics,
)

MARKER_START, MARKER_END = "<!-- bench-topic-steps:start -->", "<!-- bench-topic-steps:end -->"


def create(names: list[str]) -> None:
    """The topics on the source, each with a retention of its own and half with LogAppendTime, and on
    the target as the copy leaves them (its settings on, the source's retention)."""
    for cluster, extra in ((SOURCE, {}), (TARGET, COPY_SETTINGS)):
        admin = AdminClient(cluster.admin())
        new = [NewTopic(name, 1, 1, config={"retention.ms": str(86_400_000 + i), **extra,
                                            **({"message.timestamp.type": "LogAppendTime"} if i % 2 and not extra
                                               else {})})
               for i, name in enumerate(names)]
        for future in admin.create_topics(new, operation_timeout=60).values():
            future.result(timeout=90)
    with ClusterAdmin(TARGET) as target:
        target.wait_for_topics(dict.fromkeys(names, 1))


def copy_settings_back(names: list[str]) -> None:
    with ClusterAdmin(TARGET) as target:
        target.alter_topics_configs({name: (COPY_SETTINGS, ()) for name in names}, visible=True)


def one_at_a_time(names: list[str], manifest: Manifest) -> tuple[float, float]:
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        began = time.perf_counter()
        for name in names:
            reconcile_target_topic(source, target, name, created_by_run=True)
        reconciled = time.perf_counter() - began
        began = time.perf_counter()
        for name in names:
            restore_target_topic(source, target, name)
        return reconciled, time.perf_counter() - began


def together(names: list[str], manifest: Manifest) -> tuple[float, float]:
    with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
        began = time.perf_counter()
        reconcile_topics(manifest, source, target, names)
        reconciled = time.perf_counter() - began
        began = time.perf_counter()
        restore_target_topics(source, target, {name: name for name in names})
        return reconciled, time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-docs", action="store_true", help="do not write docs/BENCHMARKS.md")
    args = parser.parse_args()
    info = versions()
    prefix = f"steps{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}.t{i:04d}" for i in range(args.topics)]
    print(f"bench-topic-steps: {info['machine']}; {args.topics} topics {prefix}.*", flush=True)
    manifest = Manifest(tempfile.mkdtemp(prefix="bench-topic-steps-"), "bench-topic-steps")
    manifest.write_once(Part.attempt(Part.CREATED_TOPICS), {"topics": names})
    times: dict[str, list[tuple[float, float]]] = {"one at a time": [], "together": []}
    try:
        create(names)
        for _ in range(args.rounds):
            for way, run in (("one at a time", one_at_a_time), ("together", together)):
                copy_settings_back(names)
                times[way].append(run(names, manifest))
                print(f"  {way}: reconcile {times[way][-1][0]:.2f} s, restore {times[way][-1][1]:.2f} s", flush=True)
        with ClusterAdmin(SOURCE) as source, ClusterAdmin(TARGET) as target:
            wrong = [n for n in names if target.topic_configs(n) != source.topic_configs(n)]
    finally:
        for cluster in (SOURCE, TARGET):
            delete_topics(cluster, names)
    median = {way: [statistics.median(t[i] for t in runs) for i in (0, 1)] for way, runs in times.items()}
    result = {"topics": args.topics, "rounds": args.rounds,
              "reconcile_one_at_a_time_s": round(median["one at a time"][0], 2),
              "reconcile_together_s": round(median["together"][0], 2),
              "restore_one_at_a_time_s": round(median["one at a time"][1], 2),
              "restore_together_s": round(median["together"][1], 2),
              "window_saved_s": round(sum(median["one at a time"]) - sum(median["together"]), 2),
              "restore_ratio": round(median["one at a time"][1] / median["together"][1], 1),
              "topics_not_restored": len(wrong)}
    if not args.no_docs:
        write_docs(
            f"{MARKER_START}\n## The window's steps on the target topics at many topics (`make bench-topic-steps`)\n\n"
            f"{info['machine']}; Kafka {info['kafka']}, one broker a cluster. {args.topics} one-partition topics, "
            "each with a retention of its own on the source (half with LogAppendTime) and the copy's settings on "
            "the target. The check of what the source changed since the pre-copy (`reconcile_target_topics`, at "
            "the snapshot) and the restore of the copy's settings (`restore_topic_configs`, after the "
            "verification), both inside the cutover window, run one topic at a time (their requests for each "
            "topic in turn, as before) and for all topics together (one DescribeConfigs a cluster, "
            f"IncrementalAlterConfigs in requests the controller takes), alternating, {args.rounds} rounds, "
            "medians:\n\n"
            "| step | one topic at a time | all together |\n| --- | --- | --- |\n"
            f"| reconcile | {result['reconcile_one_at_a_time_s']} s | {result['reconcile_together_s']} s |\n"
            f"| restore | {result['restore_one_at_a_time_s']} s | {result['restore_together_s']} s |\n\n"
            f"The window is {result['window_saved_s']} s shorter at {args.topics} topics; topics whose configs "
            f"differ from the source's after the last restore: {len(wrong)}.\n\n"
            f"```json\n{json.dumps(result)}\n```\n\n{MARKER_END}\n",
            PROJECT_DIR / "docs" / "BENCHMARKS.md", MARKER_START, MARKER_END)
    print(json.dumps(result))
    return 0 if not wrong else 1


if __name__ == "__main__":
    raise SystemExit(main())
