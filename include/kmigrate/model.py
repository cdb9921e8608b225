"""The shared data types of a run: a partition work unit, a run of the offset map, a partition's copy
result. At the bottom of the library: imports nothing of it."""
from __future__ import annotations

import dataclasses
from typing import Any

PRESERVE = "preserve"


TRANSLATE = "translate"


@dataclasses.dataclass(frozen=True)
class WorkUnit:
    """One partition to copy up to (not including) `end_offset`, the snapshot end. `topic` is its name
    on the source; `target_topic` its name on the target (the run's renames; given empty, the same),
    where the same partition holds the same records at the same offsets."""

    topic: str
    partition: int
    end_offset: int
    mode: str = PRESERVE
    target_topic: str = ""

    def __post_init__(self) -> None:
        if not self.target_topic:
            object.__setattr__(self, "target_topic", self.topic)

    @property
    def renamed(self) -> bool:
        return self.target_topic != self.topic

    @property
    def target_key(self) -> tuple[str, int]:
        """The partition as the target names it: (target_topic, partition)."""
        return self.target_topic, self.partition


@dataclasses.dataclass
class OffsetRun:
    """Source offsets [source_start, source_start + length) sit at [target_start, ...) on the target."""

    source_start: int
    target_start: int
    length: int


@dataclasses.dataclass
class PartitionResult:
    topic: str
    partition: int
    mode: str
    source_log_start: int
    end_offset: int
    target_start: int          # the target's end when this run began (resume point)
    target_end: int
    records: int = 0           # visible records copied by this run
    bytes: int = 0             # key + value bytes of records copied one by one, plus the wire size
                               # of record batches copied whole
    whole_batches: int = 0     # record batches copied byte for byte (the rest went record by record)
    whole_records: int = 0     # the records of those batches
    fillers: int = 0           # alignment and gap fillers written
    markers: int = 0           # transaction markers written (commits + aborts)
    first_offset: int | None = None
    last_offset: int | None = None
    offset_map: list[OffsetRun] = dataclasses.field(default_factory=list)
    source_digest: str | None = None
    target_digest: str | None = None
    digests_equal: bool | None = None
    align_seconds: float = 0.0
    copy_seconds: float = 0.0
    verify_seconds: float = 0.0
    target_topic: str = ""     # the partition's topic on the target, where renamed (empty: `topic`)

    def __post_init__(self) -> None:
        if not self.target_topic:
            self.target_topic = self.topic

    def as_row(self) -> dict[str, Any]:
        """The result as its manifest row; `target_topic` only where the run renames the topic."""
        row = dataclasses.asdict(self)
        row["offset_map"] = [[r.source_start, r.target_start, r.length] for r in self.offset_map]
        if row["target_topic"] == row["topic"]:
            del row["target_topic"]
        return row
