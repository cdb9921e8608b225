"""The offset map (docs/DESIGN.md §5): source offset to target offset, through the runs a copy
recorded; the identity for preserved partitions. The one place where offsets are translated: the
verification, the consumer groups and the sink connectors all come here."""
from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.errors import ConfigError
from kmigrate.model import PRESERVE, OffsetRun


def translate_offset(runs: Sequence[OffsetRun], offset: int, target_end: int) -> int:
    """The target offset of the first record at or after source `offset` (`target_end` past the
    last run): where a committed position continues on the target."""
    for run in runs:
        if offset < run.source_start:
            return run.target_start
        if offset < run.source_start + run.length:
            return run.target_start + (offset - run.source_start)
    return target_end


def offset_mapper(offset_map: Sequence[OffsetRun]) -> Callable[[int], int | None]:
    """The target offset of the record at a source offset, None for an offset outside every run
    (the verification of a translated partition hashes each source record under it)."""
    runs = sorted(offset_map, key=lambda run: run.source_start)
    starts = [run.source_start for run in runs]

    def target_offset(source_offset: int) -> int | None:
        index = bisect.bisect_right(starts, source_offset) - 1
        if index < 0:
            return None
        run = runs[index]
        if source_offset >= run.source_start + run.length:
            return None
        return run.target_start + source_offset - run.source_start

    return target_offset


def offset_map_of(row: Mapping[str, Any] | None) -> list[OffsetRun]:
    """The offset map of a copy result row ([] without one)."""
    return [OffsetRun(*run) for run in (row or {}).get("offset_map", [])]


class OffsetTranslator:
    """Source offset -> target offset for the partitions of one run: the identity for preserved
    topics, the copy's offset map for translated ones (`kmigrate.run.copying.plan.translator_for_run`)."""

    def __init__(self, modes: Mapping[str, str], copy_rows: Mapping[tuple[str, int], Mapping[str, Any]]) -> None:
        self.modes = dict(modes)
        self.copy_rows = copy_rows

    def target_offset(self, topic: str, partition: int, offset: int) -> int:
        mode = self.modes.get(topic)
        if mode is None:
            raise ConfigError(f"{topic}[{partition}] is not part of this run's plan; select the topic or leave the "
                              "group or connector that reads it out of the migration")
        if mode == PRESERVE:
            return offset
        row = self.copy_rows.get((topic, partition))
        if row is None:
            raise ConfigError(f"{topic}[{partition}] is copied in translate mode but has no copy result with its "
                              "offset map; run the copy step first")
        return translate_offset(offset_map_of(row), offset, row["target_end"])
