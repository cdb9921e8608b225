"""Copy one partition from the source cluster to the target: the checks every copy makes first, then
preserve or translate mode."""
from __future__ import annotations

from collections.abc import Sequence

from kmigrate.config import ClusterConfig
from kmigrate.copy.preserve import copy_preserve
from kmigrate.copy.translate import copy_translate
from kmigrate.copy.writer import CopyOptions, Writer
from kmigrate.errors import SourceNotReady
from kmigrate.kafka.pool import shared_admin
from kmigrate.model import TRANSLATE, OffsetRun, PartitionResult, WorkUnit


def copy_partition(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                   options: CopyOptions = CopyOptions(), resume_map: Sequence[OffsetRun] = ()) -> PartitionResult:
    """Copy `unit` and return its result. Safe to re-run: preserve mode resumes from the target's
    end. Translate mode resumes from `resume_map`, the offset map of the earlier runs of this
    partition (from the run manifest); without it the target's data counts as an unrelated prefix."""
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    with shared_admin(source) as source_admin, shared_admin(target) as target_admin:
        source_low, source_high = source_admin.watermarks(topic, partition)
        if end > source_high:
            raise SourceNotReady(
                f"{topic}[{partition}]: snapshot end {end} is beyond the source's end {source_high}; the source "
                "partition was truncated or the snapshot is from another cluster. Take a new snapshot",
                topic=topic, partition=partition)
        if source_low > end:
            raise SourceNotReady(
                f"{topic}[{partition}]: the source's log start {source_low} moved past the snapshot end {end} "
                "(retention deleted the records); take a new snapshot", topic=topic, partition=partition)
        if unit.mode == TRANSLATE:
            return copy_translate(source, target, unit, options, source_low, target_admin, resume_map)
        writer = Writer(target, topic, partition, target_admin, options, transactional=True)
        try:
            return copy_preserve(source, target, unit, options, source_low, source_admin, target_admin, writer)
        finally:
            writer.close()
