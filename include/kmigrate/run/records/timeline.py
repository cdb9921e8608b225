"""When each step of a run began and ended, recorded by the step itself once it succeeded, and the
cutover window they make up: what a person planning a maintenance window reads in the report."""
from __future__ import annotations

import datetime
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from kmigrate.manifest import Manifest, Part, new_attempt

# the steps between "connectors stopped" and "connectors resumed", in their order
# (job_start, job_exit: the window's Spark job starting up to its copy, and ending after its
# verification: a client process of a Spark Connect server, or a whole Spark application under
# spark-submit)
WINDOW_STEPS = ("stop_connectors", "quiesce", "snapshot", "stop_mirror", "job_start", "copy", "verify", "job_exit",
                "restore_topic_configs", "migrate_acls", "replicate_groups", "migrate_connectors", "resume_connectors")


def iso(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.timezone.utc).isoformat(timespec="milliseconds")


def record(manifest: Manifest, step: str, started: float, ended: float | None = None, **details: Any) -> None:
    """One successful run of `step` (epoch seconds); a retried or re-run step adds another."""
    ended = time.time() if ended is None else ended
    manifest.write_once(f"{Part.TIMELINE}/{step}/{new_attempt()}", {
        "step": step, "started": iso(started), "ended": iso(ended), "seconds": round(ended - started, 3),
        **details})


@contextmanager
def timed(manifest: Manifest, step: str, **details: Any) -> Iterator[dict[str, Any]]:
    """Record `step` when the block ends without an exception; the block may add details."""
    started = time.time()
    yield details
    record(manifest, step, started, **details)


def steps(manifest: Manifest, parts: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every recorded step run, by start time; among `parts` when given (the manifest's parts, listed
    once for several readings), else the manifest's listed now."""
    runs = [manifest.read(part) for part in (manifest.parts() if parts is None else parts)
            if part.startswith(f"{Part.TIMELINE}/")]
    return sorted((r for r in runs if r), key=lambda r: r["started"])


def window(manifest: Manifest, stopped_at: str | None, resumed_at: str | None) -> list[dict[str, Any]]:
    """The cutover window step by step: the first run of each window step that began at or after
    the stop (a re-run of a finished run adds nothing), then the rest of the downtime (a task
    starting, retries, waiting for a worker) as one row: the window's seconds inside no step.
    Steps may overlap (the quiesce samples while the connectors stop): a second is counted once."""
    if not stopped_at or not resumed_at:
        return []
    parse = datetime.datetime.fromisoformat
    start, end = parse(stopped_at), parse(resumed_at)
    first: dict[str, dict[str, Any]] = {}
    for run in steps(manifest):
        if run["step"] in WINDOW_STEPS and run["step"] not in first and parse(run["ended"]) >= start \
                and parse(run["started"]) <= end:
            first[run["step"]] = run
    rows = [{"step": s, "seconds": first[s]["seconds"], "started": first[s]["started"]}
            for s in WINDOW_STEPS if s in first]
    spans = sorted((max(parse(first[s]["started"]), start), min(parse(first[s]["ended"]), end)) for s in first)
    inside, reach = 0.0, start
    for began, ended in spans:  # the union of the steps' spans within the window
        if ended > reach:
            inside += (ended - max(began, reach)).total_seconds()
            reach = ended
    rows.append({"step": "between steps", "seconds": round(max(0.0, (end - start).total_seconds() - inside), 3),
                 "started": None})
    return rows
