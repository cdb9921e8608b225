"""Verification (docs/DESIGN.md §3 and §3.1): one partition's log start, log end and content on both
clusters, side by side. Read-only on both.

A pre-copied range is verified while the source is live (`verify_live`), and the result kept in
the run manifest; inside the cutover window only what was copied since, plus the last
BOUNDARY_OFFSETS pre-copied offsets, is read again (`verify_partition` with `live`). The row says
which offsets were verified when, so the table still covers every record of every partition.

Compacted partitions: the source's cleaner may remove records after they were copied. Where the
digests differ, such a partition is compared record by record (`compacted_differences`): "equal"
then means every record the source holds is on the target at its offset, and every record only the
target holds is one a cleaner removes (superseded by a later record with its key, or a tombstone).
"""
from __future__ import annotations

import datetime
import time
from collections.abc import Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyInterrupted
from kmigrate.kafka.pool import shared_admin
from kmigrate.kafka.records import ContentDigest, compacted_differences, partition_digest
from kmigrate.model import PRESERVE, OffsetRun, WorkUnit
from kmigrate.offsets import offset_mapper
from kmigrate.run.verify import batches
from kmigrate.run.verify.batches import Prefix

# the last pre-copied offsets of a partition, read again in the window: a change at the seam between
# the pre-copy and the final copy shows there
BOUNDARY_OFFSETS = 100
LIVE_BY_BATCH = True  # a live verification settles whole batches byte for byte (else it reads every record)
# its batch reads, both clusters together, at most this fast: a steady read beside the task's copy rather
# than a burst (30 s of one partition of bench-dr's load, about 15 MB on the two clusters, takes half a second)
LIVE_READ_BYTES_PER_S = 32 << 20


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


def _compare(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, start: int, end: int,
             compacted: bool, split_at: int | None = None) -> tuple[ContentDigest, ContentDigest, list[str], str | None]:
    """Both sides' digests of [start, end) of `unit`'s partition (the source's counting the records
    below `split_at`), the problems found and a note; a compacted partition whose digests differ is
    compared record by record."""
    topic, partition = unit.topic, unit.partition
    source_digest = partition_digest(source, topic, partition, start, end, split_at=split_at)
    target_digest = partition_digest(target, unit.target_topic, partition, start, end)
    if source_digest.hexdigest() == target_digest.hexdigest():
        return source_digest, target_digest, [], None
    if compacted:
        _, problems = compacted_differences(source, target, topic, partition, start, end,
                                            target_topic=unit.target_topic)
        if not problems:
            extra = target_digest.records - source_digest.records
            return source_digest, target_digest, [], (
                f"compacted: the target also holds {extra} records the source's cleaner removed after they were "
                "copied (each superseded by a later record with its key, or a tombstone)")
        return source_digest, target_digest, problems, None
    return source_digest, target_digest, [
        f"content differs in [{start}, {end}) ({source_digest.records} visible records on the source, "
        f"{target_digest.records} on the target)"], None


def _compare_after(prefix: Prefix, source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                   end: int, compacted: bool) -> tuple[ContentDigest, ContentDigest, list[str], str | None]:
    """_compare of [prefix.start, end) where the batch comparison found [prefix.start, prefix.end)
    equal: only the rest is read record by record."""
    if prefix.end >= end:
        found: tuple[ContentDigest, ContentDigest, list[str], str | None] = (ContentDigest(), ContentDigest(), [], None)
    else:
        found = _compare(source, target, unit, prefix.end, end, compacted)
    for side in found[:2]:
        side.absorb(prefix.content_hash.digest(), prefix.records)
    return found


def verify_live(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, compacted: bool = False,
                previous: Mapping[str, Any] | None = None, attempts: int = 3) -> dict[str, Any]:
    """`_verify_live`, read again when the source's log start moved past what it was reading
    (records deleted, or removed by retention, meanwhile), up to `attempts` times."""
    for attempt in range(1, attempts + 1):
        try:
            return _verify_live(source, target, unit, compacted, previous)
        except CopyInterrupted:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def _verify_live(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, compacted: bool = False,
                 previous: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """While the source is live: the pre-copied range of `unit` (its end offset is the pre-copy
    round's), from the source's log start up to that end or the source's last stable offset,
    whichever is lower (an open transaction there is decided later and verified then). With
    `previous` (this partition's equal row of an earlier round) only [its end - BOUNDARY_OFFSETS,
    end) is read, and the row returned covers both. Past that seam, plain batches equal byte for byte
    on both sides are settled whole (`batches.compare`; the row's `by_batch` counts their records) and
    the rest is read record by record, so that a mirror verifying every few seconds does not decode
    what it copied whole."""
    started = time.monotonic()
    topic, partition = unit.topic, unit.partition
    with shared_admin(source) as admin:
        source_low, _ = admin.watermarks(topic, partition)
        stable = admin.stable_ends([(topic, partition)], retry=True)[(topic, partition)]
    with shared_admin(target) as admin:
        target_low, target_high = admin.watermarks(unit.target_topic, partition)
    end = max(source_low, min(unit.end_offset, stable, target_high))
    problems: list[str] = []
    if target_low > source_low:
        with shared_admin(source) as admin:  # the source's log start read again: did it move meanwhile?
            moved = admin.watermarks(topic, partition)[0] != source_low
        if moved:  # records deleted on the source, and followed on the DR cluster, between the two readings
            raise CopyInterrupted(f"{topic}[{partition}]: the source's log start moved past {source_low} while the "
                                  "verification read the ends; read again", topic=topic, partition=partition)
        problems.append(f"target log start {target_low} > source log start {source_low}")
    start = seam = source_low
    found, note, records, by_batch = [], None, 0, 0
    if previous and previous.get("equal") and previous["from"] <= source_low < previous["to"]:
        if previous["to"] >= end and not problems:  # nothing copied since (a retried round)
            return {**previous, "read_from": end, "seconds": round(time.monotonic() - started, 3)}
        # the last offsets it verified read again, record by record: a change at the seam shows there
        start, seam = max(source_low, previous["to"] - BOUNDARY_OFFSETS), previous["to"]
        digest, _, found, note = _compare(source, target, unit, start, min(seam, end), compacted, split_at=seam)
        records = previous["records"] + digest.records - digest.records_below
    if seam < end:  # whole batches compared as far as they go (batches.compare), the rest record by record
        key = (topic, partition)
        prefix = batches.compare(source, target, {key: (seam, end)}, LIVE_READ_BYTES_PER_S,
                                 on_target={key: (unit.target_topic, partition)}).get(key) if LIVE_BY_BATCH else None
        prefix = prefix or Prefix(seam, seam)
        rest, _, more, later_note = _compare_after(prefix, source, target, unit, end, compacted)
        found, note, records, by_batch = found + more, note or later_note, records + rest.records, prefix.records
    problems += found
    return {"topic": topic, "partition": partition, "from": source_low, "to": end,
            "records": records, "read_from": start, "by_batch": by_batch,
            "equal": not problems, "problems": problems, "note": note or (previous or {}).get("note"), "at": _now(),
            "seconds": round(time.monotonic() - started, 3)}


def verify_partition(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                     offset_map: Sequence[OffsetRun] = (), live: Mapping[str, Any] | None = None,
                     compacted: bool = False, marks: Sequence[int] | None = None,
                     prefix: Prefix | None = None) -> dict[str, Any]:
    """A verification row for `unit` (copied up to its snapshot end). Preserve mode: the target's
    log start and end equal the source's log start and the snapshot end, and the content of
    [log start, snapshot end) is equal; with `live` (an equal verify_live row of this partition),
    only [live end - BOUNDARY_OFFSETS, snapshot end) is read. Translate mode: every visible source
    record below the snapshot end sits, per `offset_map`, at its target offset with the same
    content. `marks`: both sides' (log start, end), read already for a task's partitions at once;
    `prefix`: what the batch comparison found equal from the window's start (batch_verify)."""
    started = time.monotonic()
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    if marks is None:  # the target's first: a mirror copying meanwhile never puts it past the source's
        with shared_admin(target) as admin:
            target_low, target_high = admin.watermarks(unit.target_topic, partition)
        with shared_admin(source) as admin:
            source_low, source_high = admin.watermarks(topic, partition)
    else:
        source_low, source_high, target_low, target_high = marks
    problems: list[str] = []
    note = None
    verified_live = None
    if unit.mode == PRESERVE:
        if target_low != source_low:
            problems.append(f"target log start {target_low} != source log start {source_low}")
        # the target may end past the snapshot end (a commit marker the copy wrote after the last
        # record, as the source has one there): what it holds up to its end is compared
        if target_high < end:
            problems.append(f"target end {target_high} < snapshot end {end}")
        elif target_high > source_high:
            problems.append(f"target end {target_high} > source end {source_high}")
        compared_end = max(end, min(target_high, source_high))
        window_from = source_low
        if live and live.get("equal") and live["from"] <= source_low < live["to"] <= compared_end:
            window_from = max(source_low, live["to"] - BOUNDARY_OFFSETS)
            verified_live = [source_low, live["to"], live["at"]]
        if prefix is not None and prefix.start == window_from and not verified_live:
            source_digest, target_digest, found, note = _compare_after(prefix, source, target, unit, compared_end,
                                                                       compacted)
        else:
            source_digest, target_digest, found, note = _compare(source, target, unit, window_from, compared_end,
                                                                 compacted, split_at=live["to"] if verified_live else None)
        problems += found
        records = source_digest.records
        if verified_live:  # the boundary's records counted once, as pre-copied
            records += live["records"] - source_digest.records_below
        verified_window = [window_from, compared_end]
    else:
        runs = sorted(offset_map, key=lambda run: run.source_start)
        if not runs:
            problems.append("no offset map recorded for this partition; run the copy job first")
            target_start = target_end = target_high
        else:
            target_start = runs[0].target_start
            target_end = runs[-1].target_start + runs[-1].length
        source_digest = partition_digest(source, topic, partition, source_low, end, offset_of=offset_mapper(runs))
        target_digest = partition_digest(target, unit.target_topic, partition, target_start, target_end)
        if source_digest.unmapped:
            problems.append(f"{source_digest.unmapped} source records below the snapshot end are not in the offset map")
        if source_digest.hexdigest() != target_digest.hexdigest():
            problems.append(f"content differs ({source_digest.records} visible records on the source, "
                            f"{target_digest.records} on the target)")
        records = source_digest.records
        verified_window = [source_low, end]
    return {
        "topic": topic, "partition": partition, "mode": unit.mode, "snapshot_end": end,
        **({"target_topic": unit.target_topic} if unit.renamed else {}),
        "source_log_start": source_low, "source_end": source_high,
        "target_log_start": target_low, "target_end": target_high,
        "records": records,
        "source_digest": source_digest.hexdigest(), "target_digest": target_digest.hexdigest(),
        # [from, to, when] verified while the source was live; [from, to) verified in the window
        "verified_live": verified_live, "verified_in_window": verified_window,
        "equal": not problems, "problems": problems, "note": note, "seconds": round(time.monotonic() - started, 3),
    }


def settle_empty(source: ClusterConfig, target: ClusterConfig, units: Sequence[WorkUnit]
                 ) -> tuple[list[WorkUnit], list[dict[str, Any]]]:
    """(the units to verify, rows of the others): a preserve-mode partition empty up to its snapshot
    end on the source, whose target is empty at the same offset, is equal without reading anything
    (two ListOffsets rounds a cluster for all of them; no Spark task)."""
    preserved = [(u.topic, u.partition) for u in units if u.mode == PRESERVE]
    if not preserved:
        return list(units), []
    with shared_admin(source) as admin:
        source_marks = admin.watermarks_of(preserved)
    empty = [u for u in units if u.mode == PRESERVE and source_marks[(u.topic, u.partition)][0] >= u.end_offset]
    if not empty:
        return list(units), []
    with shared_admin(target) as admin:
        target_marks = admin.watermarks_of((u.target_topic, u.partition) for u in empty)
    rows, settled = [], set()
    nothing = ContentDigest().hexdigest()
    for u in empty:
        (source_low, source_high), (target_low, target_high) = source_marks[(u.topic, u.partition)], \
            target_marks[(u.target_topic, u.partition)]
        if target_low == target_high == source_low == u.end_offset:
            settled.add((u.topic, u.partition))
            rows.append({
                "topic": u.topic, "partition": u.partition, "mode": u.mode, "snapshot_end": u.end_offset,
                **({"target_topic": u.target_topic} if u.renamed else {}), "source_log_start": source_low, "source_end": source_high, "target_log_start": target_low,
                "target_end": target_high, "records": 0, "source_digest": nothing, "target_digest": nothing,
                "verified_live": None, "verified_in_window": [source_low, u.end_offset], "equal": True, "problems": [],
                "note": "empty on both sides", "seconds": 0.0})
    return [u for u in units if (u.topic, u.partition) not in settled], rows
