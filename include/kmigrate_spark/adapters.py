"""What the Spark jobs ship to their executors around the library's per-unit tasks: the warm-up's
no-op, the accumulator of result rows, and the two shapes of a Spark task over its units (an RDD
map, a Spark Connect UDF). Pure Python: executors import these by name."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import Any

import kmigrate.run.copying.tasks  # noqa: F401 - imported with this module on an executor: the copier and the verification
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


Item = tuple  # (index in the job, WorkUnit or None for the warm-up, the unit's extras: JSON-able keyword args)


def run_bin(items: Sequence[Item], task: Callable[..., Any]) -> list[tuple[int, Any]]:
    """The units of one Spark task, one after another in this Python worker (whose pooled clients
    and connections they share): [(index, task(unit, **extras)), ...]. A task function with a
    `per_bin` form (`f.per_bin([(unit, extras), ...], **the partial's keywords)`, rows in order)
    is given the whole bin, to do what it can for all the units at once."""
    func = getattr(task, "func", task)
    per_bin = getattr(func, "per_bin", None)
    if per_bin is not None and items and all(unit is not None for _, unit, _ in items):
        keywords = getattr(task, "keywords", {})
        rows = per_bin([(unit, extras) for _, unit, extras in items], **keywords)
        return [(index, row) for (index, _, _), row in zip(items, rows, strict=True)]
    return [(index, task(unit, **extras) if unit is not None else task(None)) for index, unit, extras in items]


def indexed(items: Sequence[Item], task: Callable[..., Any], rows: Any = None) -> list[tuple[int, Any]]:
    """run_bin as the RDD form of a Spark job's task; its pairs are added to the `rows`
    accumulator too, when given."""
    pairs = run_bin(items, task)
    if rows is not None:
        rows.add(pairs)
    return pairs


def bin_json(items: Sequence[Item]) -> str:
    """A task's items as JSON: the row a Spark Connect job's task reads them from."""
    return json.dumps([[index, None if unit is None else dataclasses.asdict(unit), extras]
                       for index, unit, extras in items])


def by_bin(text: str, task: Callable[..., Any]) -> str:
    """The Python UDF the Spark jobs run on a Spark Connect server (which has no RDDs): `text`
    holds one task's items (`bin_json`); returns their [[index, result], ...] as JSON. Each task
    reads its own items from its row, so no task carries the others'. A plain UDF, not mapInArrow:
    its workers need neither pyarrow nor pandas (each Python worker imported both for mapInArrow:
    130 MiB and about a second of CPU). A library function, so executors import it by name."""
    items = [(index, None if unit is None else WorkUnit(**unit), extras) for index, unit, extras in json.loads(text)]
    return json.dumps(run_bin(items, task))
