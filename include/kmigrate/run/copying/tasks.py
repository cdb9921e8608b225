"""What one Spark task does with one work unit: copy it, or verify it. Pure Python (no pyspark), so
the functions are shipped to executors by reference and can be called from anywhere else too.

Each task logs its progress to stderr (the executor's log in the Spark UI; the console with
`local[*]`): a line when it starts, one every `progress_every_s` seconds, one when it ends.
"""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException

from kmigrate.claims import leases
from kmigrate.claims.leases import PartitionLease
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.preserve import verify_into
from kmigrate.copy.together import copy_together
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import KmigrateError
from kmigrate.kafka import leaders, transport
from kmigrate.kafka.pool import shared_admin
from kmigrate.model import PRESERVE, OffsetRun, PartitionResult, WorkUnit
from kmigrate.run.verify import batches as batch_verify
from kmigrate.run.verify.partition import verify_live, verify_partition

log = logging.getLogger("kmigrate.run.copying.tasks")


def _setup_logging() -> None:
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s kmigrate[%(process)d] %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def copy_task(unit: WorkUnit, clients: tuple[ClusterConfig, ClusterConfig], run_id: str,
              resume_map: Sequence[OffsetRun | Sequence[int]] = (), own_end: int | None = None,
              fetch_max_bytes: int | None = None, progress_every_s: float = 10.0,
              verify: bool = True, lease: PartitionLease | None = None,
              target_configs: Mapping[str, Mapping[str, str]] | None = None, live: bool = False) -> dict[str, Any]:
    """Copy one unit; returns its result row with "ok". `resume_map`: the offset map of the earlier
    runs of a translate-mode partition; `own_end`: where this run's earlier copy left a
    preserve-mode partition's end (copy_partition's). Both travel with the unit (`unit_extras`),
    not the whole run's with every task. `lease` and `target_configs`: what `copy_bin` took or read
    for all the units of a task at once (the unit's lease, the target topics' configs). `live`: a
    pre-copy round while the source is live (CopyOptions.live). Data errors (foreign target, offset
    mismatch, ...) become a failed row naming the partition; anything else propagates so that Spark retries the task,
    whose copier resumes from the target's end."""
    _setup_logging()
    source, target = clients
    name = f"{unit.topic}[{unit.partition}]"
    last_report = [time.monotonic()]

    def progress(records: int) -> None:
        now = time.monotonic()
        if now - last_report[0] >= progress_every_s:
            last_report[0] = now
            log.info("copy %s: %d records copied so far (snapshot end %d)", name, records, unit.end_offset)

    options = CopyOptions(run_id=run_id, progress_hook=progress, verify=verify, target_configs=target_configs,
                          live=live, **({"fetch_max_bytes": fetch_max_bytes} if fetch_max_bytes else {}))
    log.info("copy %s: started, %s mode, up to snapshot end %d", name, unit.mode, unit.end_offset)
    try:
        result = copy_partition(source, target, unit, options, offset_runs(resume_map), own_end, lease)
    except KmigrateError as exc:
        log.info("copy %s: FAILED: %s", name, exc)
        return {"ok": False, "topic": unit.topic, "partition": unit.partition, "mode": unit.mode, "error": str(exc)}
    log.info("copy %s: done, %d records from offset %d, %d fillers, %d markers, digests equal: %s",
             name, result.records, result.target_start, result.fillers, result.markers, result.digests_equal)
    return {"ok": True, **result.as_row()}


def copy_bin(items: Sequence[tuple[WorkUnit, Mapping[str, Any]]], clients: tuple[ClusterConfig, ClusterConfig],
             run_id: str, **options: Any) -> list[dict[str, Any]]:
    """copy_task over the (unit, extras) of one Spark task, with what the copies share done once
    for all of them: the leases on their target partitions taken in one append to the claims log
    and released in another, the target topics' configs read in one request, and the partitions'
    leaders looked up in one request a cluster (`leaders.remember`). When that fails, or for a
    lease another copier holds, each copy does it on its own as copy_task alone does."""
    source, target = clients
    tps, on_target = [key(u) for u, _ in items], [u.target_key for u, _ in items]
    lease_s = CopyOptions().lease_s
    held = {key(u): PartitionLease(target, run_id, u.target_topic, u.partition, lease_s) for u, _ in items}
    configs = None
    try:
        try:
            leases.acquire_all(list(held.values()))
            with shared_admin(target) as admin:
                configs = admin.topics_configs({u.target_topic for u, _ in items})
            leaders.remember(source, tps)
            leaders.remember(target, on_target)
        except (KmigrateError, KafkaException) as exc:
            log.info("copy: preparing the task's partitions at once failed (%s); each copy does it on its own", exc)
        together = {}
        if configs is not None and transport.raw_capable(source) and transport.raw_capable(target):
            together = copy_together(source, target, [u for u, _ in items if held[key(u)].held()],
                                     {tp: lease.check for tp, lease in held.items()})
        return [_together_row(together[key(u)], clients, options.get("verify", True)) if key(u) in together else
                copy_task(u, clients, run_id, **extras, **options, lease=held[key(u)], target_configs=configs)
                for u, extras in items]
    finally:
        leases.release_all(list(held.values()))
        leaders.forget(source, tps)
        leaders.forget(target, on_target)


def _together_row(result: PartitionResult, clients: tuple[ClusterConfig, ClusterConfig], verify: bool
                  ) -> dict[str, Any]:
    """The row of a partition copied by copy_together, its digests compared when the copy verifies."""
    if verify:
        verify_into(*clients, result, 0)
    log.info("copy %s[%d]: done together with the task's other partitions, %d records in %d batches, digests equal: %s",
             result.topic, result.partition, result.records, result.whole_batches, result.digests_equal)
    return {"ok": True, **result.as_row()}


copy_task.per_bin = copy_bin  # type: ignore[attr-defined] - adapters.run_bin runs a task's units through it


def verify_task(unit: WorkUnit, clients: tuple[ClusterConfig, ClusterConfig],
                offset_map: Sequence[OffsetRun | Sequence[int]] = (), live: Mapping[str, Any] | None = None,
                compacted: bool = False, marks: Sequence[int] | None = None,
                prefix: batch_verify.Prefix | None = None) -> dict[str, Any]:
    """Verify one unit; a verification row ("equal", "problems"). `offset_map`: a translate-mode
    partition's offset map from the copy; `live`: its row verified while the source was live (only
    what came after is read again); `compacted`: its topic is compacted; `marks` and `prefix`: what
    `verify_bin` read for all the task's units at once. Errors become a row too."""
    _setup_logging()
    source, target = clients
    name = f"{unit.topic}[{unit.partition}]"
    try:
        row = verify_partition(source, target, unit, offset_runs(offset_map), live, compacted, marks, prefix)
    except KmigrateError as exc:
        log.info("verify %s: FAILED: %s", name, exc)
        return {"topic": unit.topic, "partition": unit.partition, "mode": unit.mode, "equal": False,
                "problems": [str(exc)]}
    log.info("verify %s: %s", name, "equal" if row["equal"] else "; ".join(row["problems"]))
    return row


def verify_bin(items: Sequence[tuple[WorkUnit, Mapping[str, Any]]],
               clients: tuple[ClusterConfig, ClusterConfig]) -> list[dict[str, Any]]:
    """verify_task over the (unit, extras) of one Spark task, what can be read for all of them at
    once read once: both sides' log starts and ends (one ListOffsets round a cluster) and, for
    preserve-mode partitions not verified while live, the batches equal on both sides
    (batch_verify: one Fetch a leader a round). Whatever that leaves, or when it fails, each
    unit's verification reads as verify_task alone does."""
    source, target = clients
    marks: dict[tuple[str, int], tuple[int, int, int, int]] = {}
    prefixes: dict[tuple[str, int], batch_verify.Prefix] = {}
    fast = [key(u) for u, extras in items if u.mode == PRESERVE and not extras.get("live")]
    named = {key(u): u.target_key for u, _ in items if u.renamed}  # the target's names, renamed
    if fast:
        try:
            with shared_admin(target) as admin:  # first: a mirror copying meanwhile never puts it past the source
                on_target = admin.watermarks_of(named.get(tp, tp) for tp in fast)
            with shared_admin(source) as admin:
                on_source = admin.watermarks_of(fast)
            marks = {tp: (*on_source[tp], *on_target[named.get(tp, tp)]) for tp in fast}
            if transport.raw_capable(source) and transport.raw_capable(target):
                ends = {key(u): u.end_offset for u, _ in items}
                prefixes = batch_verify.compare(source, target, {
                    tp: (low, max(ends[tp], min(high, target_high))) for tp, (low, high, _, target_high) in marks.items()},
                    on_target=named)
        except (KmigrateError, KafkaException) as exc:
            log.info("verify: reading the task's partitions at once failed (%s); each is read on its own", exc)
            marks, prefixes = {}, {}
    return [verify_task(u, clients, **extras, marks=marks.get(key(u)), prefix=prefixes.get(key(u)))
            for u, extras in items]


verify_task.per_bin = verify_bin  # type: ignore[attr-defined] - adapters.run_bin runs a task's units through it


def live_verify_task(unit: WorkUnit, clients: tuple[ClusterConfig, ClusterConfig], compacted: bool = False,
                     previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Verify the pre-copied range of one unit while the source is live (verify_live, reading only
    what came after the partition's `previous` row); a row with "equal", errors included."""
    _setup_logging()
    source, target = clients
    try:
        row = verify_live(source, target, unit, compacted, previous)
    except KmigrateError as exc:
        row = {"topic": unit.topic, "partition": unit.partition, "equal": False, "problems": [str(exc)]}
    log.info("verify %s[%d] while live: %s", unit.topic, unit.partition,
             "equal" if row["equal"] else "; ".join(row["problems"]))
    return row


def offset_runs(runs: Sequence[OffsetRun | Sequence[int]]) -> list[OffsetRun]:
    """An offset map as OffsetRuns, from OffsetRuns or [source_start, target_start, length] lists
    (its JSON form, as a unit's extras travel to a Spark Connect server)."""
    return [r if isinstance(r, OffsetRun) else OffsetRun(*r) for r in runs]


def key(unit: WorkUnit) -> tuple[str, int]:
    return unit.topic, unit.partition


def copy_extras(resume_maps: Mapping[tuple[str, int], Sequence[OffsetRun]],
                copied_ends: Mapping[tuple[str, int], int]) -> Callable[[WorkUnit], dict[str, Any]]:
    """What a copy task needs of the run beyond its unit, per unit (JSON-able)."""
    return lambda u: {"resume_map": [[r.source_start, r.target_start, r.length] for r in resume_maps.get(key(u), ())],
                      "own_end": copied_ends.get(key(u))}


def verify_extras(offset_maps: Mapping[tuple[str, int], Sequence[OffsetRun]],
                  live: Mapping[tuple[str, int], Mapping[str, Any]],
                  compacted: Collection[str]) -> Callable[[WorkUnit], dict[str, Any]]:
    """What a verify task needs of the run beyond its unit, per unit (JSON-able)."""
    return lambda u: {"offset_map": [[r.source_start, r.target_start, r.length] for r in offset_maps.get(key(u), ())],
                      "live": live.get(key(u)), "compacted": u.topic in compacted}


def live_verify_extras(previous: Mapping[tuple[str, int], Mapping[str, Any]],
                       compacted: Collection[str]) -> Callable[[WorkUnit], dict[str, Any]]:
    """What a live verify task needs of the run beyond its unit, per unit (JSON-able)."""
    return lambda u: {"previous": previous.get(key(u)), "compacted": u.topic in compacted}
