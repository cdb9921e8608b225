"""Verification (docs/DESIGN.md §3, the verify step): one partition's log start, log end and content digest
on both clusters, side by side. Read-only on both."""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import partition_digest
from kmigrate.model import PRESERVE, OffsetRun, WorkUnit
from kmigrate.offsets import offset_mapper


def verify_partition(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                     offset_map: Sequence[OffsetRun] = ()) -> dict[str, Any]:
    """A verification row for `unit` (copied up to its snapshot end). Preserve mode: the target's
    log start and end equal the source's log start and the snapshot end, and the digests over
    [log start, snapshot end) are equal. Translate mode: every visible source record below the
    snapshot end sits, per `offset_map`, at its target offset with the same content."""
    started = time.monotonic()
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    with ClusterAdmin(source) as admin:
        source_low, source_high = admin.watermarks(topic, partition)
    with ClusterAdmin(target) as admin:
        target_low, target_high = admin.watermarks(topic, partition)
    problems: list[str] = []
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
        source_digest = partition_digest(source, topic, partition, source_low, compared_end)
        target_digest = partition_digest(target, topic, partition, source_low, compared_end)
    else:
        runs = sorted(offset_map, key=lambda run: run.source_start)
        if not runs:
            problems.append("no offset map recorded for this partition; run the copy job first")
            target_start = target_end = target_high
        else:
            target_start = runs[0].target_start
            target_end = runs[-1].target_start + runs[-1].length
        source_digest = partition_digest(source, topic, partition, source_low, end, offset_of=offset_mapper(runs))
        target_digest = partition_digest(target, topic, partition, target_start, target_end)
        if source_digest.unmapped:
            problems.append(f"{source_digest.unmapped} source records below the snapshot end are not in the offset map")
    if source_digest.hexdigest() != target_digest.hexdigest():
        problems.append(f"content differs ({source_digest.records} visible records on the source, "
                        f"{target_digest.records} on the target)")
    return {
        "topic": topic, "partition": partition, "mode": unit.mode, "snapshot_end": end,
        "source_log_start": source_low, "source_end": source_high,
        "target_log_start": target_low, "target_end": target_high,
        "records": source_digest.records,
        "source_digest": source_digest.hexdigest(), "target_digest": target_digest.hexdigest(),
        "equal": not problems, "problems": problems, "seconds": round(time.monotonic() - started, 3),
    }
