"""Translate mode: the visible records appended densely after whatever the target holds, with an
exact offset map (docs/DESIGN.md §5)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from kmigrate.config import ClusterConfig
from kmigrate.copy.writer import CopyOptions, Writer, contiguous_runs
from kmigrate.errors import OffsetMismatch, TargetDiverged
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import iter_range, reader
from kmigrate.model import TRANSLATE, OffsetRun, PartitionResult, WorkUnit


def copy_translate(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, options: CopyOptions,
                    source_low: int, target_admin: ClusterAdmin, resume_map: Sequence[OffsetRun]) -> PartitionResult:
    """Visible records appended densely after whatever the target holds; an exact offset map is kept."""
    topic, partition, end, on_target = unit.topic, unit.partition, unit.end_offset, unit.target_topic
    _, target_high = target_admin.watermarks(on_target, partition)
    result = PartitionResult(topic, partition, TRANSLATE, source_low, end, target_high, target_high,
                             target_topic=on_target)
    runs = [dataclasses.replace(run) for run in resume_map]
    start = source_low
    if runs:
        mapped_end = runs[-1].target_start + runs[-1].length
        if target_high != mapped_end:
            raise TargetDiverged(
                f"{on_target}[{partition}]: the target ends at {target_high}, but the offset map of the earlier runs "
                f"ends at {mapped_end}: another producer wrote to the target topic, or an earlier copy stopped "
                "before recording its map. Nothing was written. Stop other producers to the target topic and re-run; "
                "if the topic is in use on the target, leave it out of the run",
                topic=topic, partition=partition)
        start = max(source_low, runs[-1].source_start + runs[-1].length)
    writer = Writer(target, on_target, partition, target_admin, options, transactional=False)
    writer.next_offset = target_high
    started = time.monotonic()
    consumer = reader(source)
    try:
        for chunk in iter_range(consumer, topic, partition, start, end, idle_timeout_s=options.idle_timeout_s):
            for run in contiguous_runs(chunk):
                offset = run[0].offset()
                if runs and offset == runs[-1].source_start + runs[-1].length:
                    runs[-1].length += len(run)
                else:
                    runs.append(OffsetRun(offset, writer.next_offset, len(run)))
                result.bytes += writer.write_run(run)
                result.records += len(run)
            writer.bulk.poll(0)
            writer.raise_if_failed()
            if options.progress_hook is not None:
                options.progress_hook(result.records)
        writer.flush_bulk()
    finally:
        consumer.close()
        writer.close()
    result.copy_seconds = time.monotonic() - started
    _, result.target_end = target_admin.watermarks(on_target, partition)
    if result.target_end != writer.next_offset:
        raise OffsetMismatch(on_target, partition, writer.next_offset, result.target_end)
    result.offset_map = runs
    if result.records:
        result.first_offset, result.last_offset = runs[0].source_start, runs[-1].source_start + runs[-1].length - 1
    return result
