"""What the mirror's tasks report while their term runs (docs/DESIGN.md §12). A term's Spark job
returns its rows only when it ends, and between two terms nothing is copied for a second or two;
so terms are long (an hour), and each task replaces a part of its own in the run manifest with its
rows as it goes: after each round of its live verification, and at least every `verify_every_s`.
The driver reads the running term's reports (`read`), so that its status names failing partitions
and the ranges a failover need not read again stay current. A task that cannot reach the run
manifest reports at its term's end only."""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kmigrate.errors import KmigrateError
from kmigrate.kafka import multi
from kmigrate.manifest import Manifest

log = logging.getLogger(__name__)

# a part a task (named by its partitions): {"term": n, "at": ..., "rows": [...], "fetches": {"sent", "in_full"}},
# the last the Fetches its process sent in fetch sessions so far (kafka.multi.fetches_sent)
REPORTS = "mirror-reports"


def reporter(state_location: str | None, run_id: str, term: int, partitions: Mapping[tuple[str, int], Any]
             ) -> Callable[[], None]:
    """A task's report: the row of each of its partitions (each with its `row()`) as they
    stand, replacing the part of its partitions; nothing when the run manifest is not readable from
    here. A report that fails is said and left to the next."""
    if state_location is None:
        return lambda: None
    part = f"{REPORTS}/{hashlib.blake2b(repr(sorted(partitions)).encode(), digest_size=8).hexdigest()}"
    manifest: list[Manifest] = []

    def report() -> None:
        try:
            if not manifest:
                manifest.append(Manifest(state_location, run_id))
            manifest[0].replace(part, {"term": term, "at": time.time(), "rows": [f.row() for f in partitions.values()],
                                       "fetches": multi.fetches_sent()})
        except KmigrateError as exc:
            log.warning("mirror: the task's report could not be written (%s); the next one tries again", exc)

    return report


def read(manifest: Manifest, term: int) -> list[dict[str, Any]]:
    """The rows the tasks of term `term` reported so far (none from another term's tasks)."""
    rows: list[dict[str, Any]] = []
    for part in manifest.parts():
        if part.startswith(f"{REPORTS}/"):
            report = manifest.read(part) or {}
            if report.get("term") == term:
                rows += report.get("rows", [])
    return rows
