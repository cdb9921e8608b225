"""Copy plans: the partition work units of a run (one a partition, up to its end offset), stored in
its manifest; the copy results they lead to, and what the group and connector steps read of them."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.model import PRESERVE, TRANSLATE, OffsetRun, PartitionResult, WorkUnit
from kmigrate.offsets import OffsetTranslator, offset_map_of


def topic_partitions(admin: ClusterAdmin, topic: str) -> list[dict[str, int]]:
    """Each partition's log start and end offsets now."""
    return topics_partitions(admin, [topic])[topic]


def topics_partitions(admin: ClusterAdmin, topics: Iterable[str], *, stable: bool = False
                      ) -> dict[str, list[dict[str, int]]]:
    """{topic: each partition's log start and end offsets now}, in one metadata request and two
    ListOffsets rounds for all of them (not a request a partition: thousands of partitions are read
    in about the time of one). `stable`: the end is the last stable offset (a third round), where a
    pre-copy round ends while the source is live: beyond it a transaction is still open."""
    counts = admin.partition_counts(topics)
    keys = [(t, p) for t, n in counts.items() for p in range(n)]
    marks = admin.watermarks_of(keys)
    ends = admin.stable_ends(keys, retry=True) if stable else {k: marks[k][1] for k in keys}
    return {t: [{"partition": p, "log_start": marks[(t, p)][0], "end": ends[(t, p)]} for p in range(n)]
            for t, n in counts.items()}


def plan_from_topics(topics: Mapping[str, Mapping[str, Any]], modes: Mapping[str, str] | None = None,
                     target_names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One work unit per partition of `topics` ({topic: {"partitions": topic_partitions(...)}}), up
    to its end offset, largest first. `target_names`: {source topic: its name on the target} of the
    topics the run renames (a unit of one keeps it as "target_topic")."""
    units = []
    for topic, entry in topics.items():
        mode = (modes or {}).get(topic, PRESERVE)
        if mode not in (PRESERVE, TRANSLATE):
            raise ConfigError(f"topic {topic!r}: mode {mode!r} is not 'preserve' or 'translate'")
        renamed = (target_names or {}).get(topic, topic)
        for p in entry["partitions"]:
            units.append({"topic": topic, "partition": p["partition"], "end_offset": p["end"], "mode": mode,
                          "offsets": p["end"] - p["log_start"],
                          **({"target_topic": renamed} if renamed != topic else {})})
    units.sort(key=lambda u: (-u["offsets"], u["topic"], u["partition"]))
    return {"units": units}


def build_plan(source: ClusterConfig, topics: Iterable[str], modes: Mapping[str, str] | None = None,
               target_names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A plan for `topics` up to their current ends (without a snapshot: tests and benchmarks)."""
    with ClusterAdmin(source) as admin:
        return plan_from_topics({t: {"partitions": p} for t, p in topics_partitions(admin, topics).items()}, modes,
                                target_names)


def work_units(plan: dict[str, Any]) -> list[WorkUnit]:
    return [WorkUnit(u["topic"], u["partition"], u["end_offset"], u["mode"], u.get("target_topic", ""))
            for u in plan["units"]]


def read_plan(manifest: Manifest, part: str = Part.PLAN) -> dict[str, Any]:
    plan = manifest.read(part)
    if plan is None:
        raise ConfigError(f"the run manifest at {manifest.location} has no {part}; run the snapshot step first")
    return plan


def latest_copy_rows(manifest: Manifest) -> dict[tuple[str, int], dict[str, Any]]:
    """The newest successful copy result row of each partition, over every copy attempt."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for part in manifest.parts():
        if part.startswith(f"{Part.COPY_RESULTS}/"):
            for row in manifest.read(part)["rows"]:
                if row.get("ok"):
                    latest[(row["topic"], row["partition"])] = row
    return latest


Latest = Mapping[tuple[str, int], Mapping[str, Any]]


def translate_maps(manifest: Manifest, latest: Latest | None = None) -> dict[tuple[str, int], list[OffsetRun]]:
    """The offset map of each translate-mode partition, from its newest copy result (a resumed
    copy and the verification both need it; preserved partitions map to themselves). `latest`:
    latest_copy_rows(manifest), when the caller has read them already."""
    rows = latest_copy_rows(manifest) if latest is None else latest
    return {key: offset_map_of(row) for key, row in rows.items() if row["mode"] == TRANSLATE}


def copied_ends(manifest: Manifest, latest: Latest | None = None) -> dict[tuple[str, int], int]:
    """Where this run's newest copy of each preserve-mode partition left the target's end: the
    target holds this run's records up to there, even once the source no longer has them."""
    rows = latest_copy_rows(manifest) if latest is None else latest
    return {key: row["target_end"] for key, row in rows.items() if row["mode"] != TRANSLATE}


def copy_progress(target: ClusterConfig, units: Sequence[WorkUnit],
                  manifest: Manifest | None = None) -> Callable[[], str]:
    """A status line for the copy job's driver: how many partitions the target holds up to their
    snapshot end, and how many offsets are still to go (read from the target, so it counts every
    task, retried ones too). With `manifest`, each reading also replaces its part copy-progress
    (what the run's metrics serve), with the offsets a second since the first reading."""
    first: list[tuple[float, int]] = []

    def line() -> str:
        try:
            with ClusterAdmin(target, timeout_s=5) as admin:
                ends = admin.end_offsets(u.target_key for u in units)
        except KmigrateError as exc:
            return f"the target's end offsets are not available ({exc})"
        to_go = [max(0, u.end_offset - ends[u.target_key]) for u in units]
        now = time.time()
        first[:] = first or [(now, sum(to_go))]
        if manifest is not None:
            began, at_first = first[0]
            manifest.replace(Part.COPY_PROGRESS, {
                "at": now, "began": began, "partitions": len(units),
                "partitions_to_go": sum(1 for n in to_go if n), "offsets_to_go": sum(to_go),
                "offsets_per_s": round((at_first - sum(to_go)) / (now - began), 1) if now > began else 0.0})
        return (f"{sum(1 for n in to_go if n == 0)}/{len(units)} partitions at their snapshot end on the target, "
                f"{sum(to_go):,} offsets to go")
    return line


def write_pre_copy_plan(manifest: Manifest, source: ClusterConfig, topics: Sequence[str],
                        modes: Mapping[str, str], target_names: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The pre-copy's plan: the topics up to their last stable offsets now, while the source is still
    live (an open transaction's records are left for a later round or the window); `target_names`:
    the topics' names on the target (the run's renames)."""
    def compute() -> dict[str, Any]:
        with ClusterAdmin(source) as admin:
            partitions = topics_partitions(admin, topics, stable=True)
        return plan_from_topics({t: {"partitions": p} for t, p in partitions.items()}, modes, target_names)
    return manifest.get_or_create(Part.PRE_COPY_PLAN, compute)


def targets_settled(target: ClusterConfig, units: Sequence[WorkUnit], still_for_s: float = 3.0,
                    timeout_s: float = 30.0) -> str:
    """Wait until the target's end offsets of `units` have not moved for `still_for_s`: the copies of
    a stopped Spark job may still be writing for a moment (a Python worker outlives its killed task
    by up to spark.python.task.killTimeout, 2 s by default), and a copy started again meanwhile would
    race them. Returns a line saying how long it waited; gives up after `timeout_s` (a copy that
    then meets another writer fails with OffsetMismatch, naming the partition)."""
    started = time.monotonic()
    with ClusterAdmin(target, timeout_s=5) as admin:
        last, still_since = None, time.monotonic()
        while True:
            ends = admin.end_offsets(u.target_key for u in units)
            now = time.monotonic()
            if ends != last:
                last, still_since = ends, now
            elif now - still_since >= still_for_s:
                return f"the target's end offsets were still for {still_for_s:.0f}s after {now - started:.1f}s"
            if now - started > timeout_s:
                return f"the target's end offsets still moved after {timeout_s:.0f}s; going on"
            time.sleep(0.2)


def translator_for_run(manifest: Manifest) -> OffsetTranslator:
    """Source offset -> target offset for every partition of the run, from its plan and copy results."""
    modes = {unit["topic"]: unit["mode"] for unit in read_plan(manifest)["units"]}
    return OffsetTranslator(modes, latest_copy_rows(manifest))


def units_to_copy(source: ClusterConfig, target: ClusterConfig, units: Sequence[WorkUnit],
                  manifest: Manifest, *, settle_copied: bool = True) -> tuple[list[WorkUnit], list[dict[str, Any]]]:
    """(the units to copy, result rows of the others), read in two ListOffsets rounds a cluster. A
    preserve-mode partition needs no Spark task when it is empty on the source and on the target at
    the same offset (nothing to copy, nothing to compare), or, with `settle_copied`, when a copy of
    this run already brought it to its end and the target's log start still equals the source's (in
    the window after a pre-copy, most partitions; the verification still checks each)."""
    done = {key for key, row in latest_copy_rows(manifest).items() if row["mode"] == PRESERVE} if settle_copied else set()
    preserved = [u for u in units if u.mode == PRESERVE]
    if not preserved:
        return list(units), []
    keys = [(u.topic, u.partition) for u in preserved]
    with ClusterAdmin(source) as admin:
        source_low = admin.start_offsets(keys, retry=True)
    candidates = [u for u in preserved if (u.topic, u.partition) in done or source_low[(u.topic, u.partition)] >= u.end_offset]
    if not candidates:
        return list(units), []
    with ClusterAdmin(target) as admin:
        wanted = [u.target_key for u in candidates]
        # target topics the job has just created may not have their leaders yet: asked until they answer
        target_low, target_end = admin.start_offsets(wanted, retry=True), admin.end_offsets(wanted, retry=True)

    def settled(u: WorkUnit) -> bool:
        key, on_target = (u.topic, u.partition), u.target_key
        if source_low[key] >= u.end_offset:  # empty up to the snapshot end
            return target_low[on_target] == target_end[on_target] == u.end_offset
        return target_end[on_target] >= u.end_offset and target_low[on_target] == source_low[key] <= u.end_offset

    skipped = {(u.topic, u.partition) for u in candidates if settled(u)}
    rows = [{"ok": True, "skipped": True, **PartitionResult(
        u.topic, u.partition, u.mode, source_low[(u.topic, u.partition)], u.end_offset,
        target_end[u.target_key], target_end[u.target_key],
        target_topic=u.target_topic).as_row()}
        for u in units if (u.topic, u.partition) in skipped]
    return [u for u in units if (u.topic, u.partition) not in skipped], rows


def source_ends_now(source: ClusterConfig, units: Sequence[WorkUnit]) -> list[WorkUnit]:
    """`units` up to the source's last stable offsets now (one ListOffsets round): a catch-up round
    while the source is live copies what is decided."""
    with ClusterAdmin(source) as admin:
        ends = admin.stable_ends(((u.topic, u.partition) for u in units), retry=True)
    return [dataclasses.replace(u, end_offset=max(u.end_offset, ends[(u.topic, u.partition)])) for u in units]
