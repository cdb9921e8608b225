"""The cutover window as one course of steps, run back to back by one task (docs/DESIGN.md §3.2):
no scheduler starts a task between two of them. The steps and their order are here (`WINDOW`,
`window_course`), what each step does in kmigrate.run.window.steps, which runs the course
(`run_window`); its caller supplies only what is its own (the window's Spark job, how an error
fails its task for good). Each step is idempotent; each that ends is marked
done in the run manifest (part cutover/<step>), so that a retry of the course continues at the
first step not done, and each that fails leaves its error (part cutover-failures/<step>/<attempt>).
What a person reads per step, in the grid and the report, comes from those marks (`outcomes`)."""
from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.manifest import Manifest, Part, new_attempt
from kmigrate.run.records.timeline import iso

# the window's course: its steps in their order; a tuple in a step's place runs side by side (each of
# those writes its own things on the target: topic configs, ACLs, group offsets, connectors). What
# each does is kmigrate.run.window.steps' (the copy and verification: the caller's Spark job).
WINDOW = ("stop_connectors", "quiesce", "snapshot", "copy_and_verify",
          ("restore_topic_configs", "migrate_acls", "replicate_groups", "migrate_connectors"), "resume_connectors")
# the course's steps, in their order
STEPS = tuple(name for item in WINDOW for name in ((item,) if isinstance(item, str) else item))
# a planned failover of a mirrored run (kafka_dr_failover): its mirror stopped after the snapshot, before the
# window's copy writes where the mirror wrote
AFTER_SNAPSHOT = "stop_mirror"
FAILOVER_STEPS = (*STEPS[:3], AFTER_SNAPSHOT, *STEPS[3:])
DONE, FAILED, NOT_REACHED = "done", "failed", "not reached"

Step = tuple[str, Callable[[], Any]]


def window_course(calls: Mapping[str, Callable[[], Any]], stop_mirror: Callable[[], Any] | None = None
                  ) -> list[Step | list[Step]]:
    """The window's course (WINDOW) as `run_course` runs it, each step's call from `calls` by its
    name; with `stop_mirror` (a planned failover's), that step between the snapshot and the copy."""
    course: list[Step | list[Step]] = []
    for item in WINDOW:
        course.append((item, calls[item]) if isinstance(item, str) else [(name, calls[name]) for name in item])
        if item == "snapshot" and stop_mirror is not None:
            course.append((AFTER_SNAPSHOT, stop_mirror))
    return course


def done_part(step: str) -> str:
    return f"{Part.CUTOVER}/{step}"


def run_course(manifest: Manifest, steps: Sequence[Step | Sequence[Step]], say: Callable[[str], None]) -> list[str]:
    """Run `steps` ((name, call) in STEPS' order) one after another, skipping those marked done by
    an earlier attempt; a list of steps in their place runs side by side (steps that touch nothing
    of each other's), the course going on once all have ended. A step's error is recorded and
    raised as it is, the steps after it left for the retry. Returns the names of the steps this
    call ran."""
    ran: list[str] = []
    for item in steps:
        group = [item] if isinstance(item[0], str) else list(item)
        todo = [(name, call) for name, call in group if not _done_before(manifest, name, say)]
        if len(todo) == 1:
            ran.append(_run_step(manifest, *todo[0], say))
        elif todo:
            with concurrent.futures.ThreadPoolExecutor(len(todo), thread_name_prefix="cutover-step") as pool:
                futures = [pool.submit(_run_step, manifest, name, call, say) for name, call in todo]
            errors = [f.exception() for f in futures if f.exception() is not None]
            if errors:
                raise errors[0]
            ran += [f.result() for f in futures]
    return ran


def _done_before(manifest: Manifest, name: str, say: Callable[[str], None]) -> bool:
    done = manifest.read(done_part(name))
    if done:
        say(f"{name}: done by an earlier attempt (ended {done['ended']}); continuing after it")
    return bool(done)


def _run_step(manifest: Manifest, name: str, call: Callable[[], Any], say: Callable[[str], None]) -> str:
    began = time.time()
    try:
        call()
    except Exception as exc:
        manifest.write_once(f"{Part.CUTOVER_FAILURES}/{name}/{new_attempt()}", {
            "step": name, "started": iso(began), "failed": iso(time.time()), "error": str(exc)[:4000]})
        say(f"{name}: failed after {time.time() - began:.2f}s: {exc}")
        raise
    ended = time.time()
    manifest.write_once(done_part(name), {"step": name, "started": iso(began), "ended": iso(ended),
                                          "seconds": round(ended - began, 3)})
    say(f"{name}: done in {ended - began:.2f}s")
    return name


def outcomes(manifest: Manifest, steps: Sequence[str] = STEPS) -> list[dict[str, Any]]:
    """Each of `steps` (a migration's, or a failover's FAILOVER_STEPS): done (its seconds), failed (its attempts' errors, none of which
    ended it), or not reached; a step that failed before an attempt did it is done, its failures
    counted."""
    failures: dict[str, list[dict[str, Any]]] = {}
    for part in sorted(p for p in manifest.parts() if p.startswith(f"{Part.CUTOVER_FAILURES}/")):
        failure = manifest.read(part)
        if failure:
            failures.setdefault(failure["step"], []).append(failure)
    rows = []
    for step in steps:
        done = manifest.read(done_part(step))
        failed = failures.get(step, [])
        state = DONE if done else FAILED if failed else NOT_REACHED
        rows.append({"step": step, "state": state, "seconds": (done or {}).get("seconds"),
                     "failures": len(failed), "errors": [f["error"] for f in failed]})
    return rows
