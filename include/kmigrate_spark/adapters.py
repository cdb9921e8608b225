"""What the Spark jobs ship to their executors around the library's per-unit tasks: the warm-up's
no-op, the accumulator of result rows, and the two shapes of a unit's task (an RDD map, a Spark
Connect UDF). Pure Python: executors import these by name."""
from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import kmigrate.run.tasks  # noqa: F401 - imported with this module on an executor: the copier and the verification
from kmigrate.model import WorkUnit


def ready(_: object = None) -> str:
    """A no-op task: shipping it makes an executor import this library (the Spark jobs' warm-up)."""
    return "ready"


class RowsParam:
    """The accumulator of (index, result) pairs through which a spark-submit job's driver learns
    each unit's result as its task ends (collect() returns them all at the job's end). Spark
    applies a task's update once, from its successful attempt only."""

    def zero(self, _value: list) -> list:
        return []

    def addInPlace(self, pairs: list, more: list) -> list:  # noqa: N802 - Spark's name
        pairs.extend(more)
        return pairs


def indexed(item: tuple[int, WorkUnit | None], task: Callable[[WorkUnit | None], Any],
            rows: Any = None) -> tuple[int, Any]:
    """(index, task(unit)) of an (index, unit) pair: the RDD form of a Spark job's work; added to
    the `rows` accumulator too, when given."""
    index, unit = item
    pair = (index, task(unit))
    if rows is not None:
        rows.add([pair])
    return pair


def by_index(index: int, task: Callable[[WorkUnit | None], Any], units: Sequence[str | None]) -> str:
    """The Python UDF the Spark jobs run on a Spark Connect server (which has no RDDs): `index`
    picks a work unit from `units` (JSON, null for the warm-up); returns [index, the task's
    result] as JSON. A plain UDF, not mapInArrow: its workers need neither pyarrow nor pandas
    (each Python worker imported both for mapInArrow: 130 MiB and about a second of CPU). A
    library function, so executors import it by name."""
    text = units[index]
    return json.dumps([index, task(WorkUnit(**json.loads(text)) if text else None)])
