"""A run's progress as its manifest tells it, for the run's metrics (kmigrate.run.report.metrics): whether it
finished (its report written; a mirror, stopped other than by a failover), when it last moved on, its phase (the last step it recorded), each step's seconds, the
copy's partitions and offsets to go and its pace, the verification's result, and the recovery
figures of a drill or a failover. Read from the manifest alone: the exporter that serves it
connects to no cluster."""
from __future__ import annotations

import datetime
from typing import Any

from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.schedule import cutover_time
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.drill import CUT as MIRROR_CUT  # a mirror drill's cut reached, with the mirror's lag then
from kmigrate.run.mirror.failover import PLANNED
from kmigrate.run.mirror.promote import UNPLANNED
from kmigrate.run.mirror.term import STOP
from kmigrate.run.records import events, timeline

REPORT = "report.md"  # every run's last task writes it: the run finished


def of_run(manifest: Manifest, parts: list[str] | None = None) -> dict[str, Any] | None:
    """The run's progress; None for a folder with nothing to show as a run: no step recorded, no
    snapshot or plan taken, no copy begun (a run refused at its preflight), or a mirror that is running
    (its own metrics show it, and its heartbeat is its progress)."""
    parts = manifest.parts() if parts is None else parts
    status = mirror_status.read(manifest) if mirror_status.PART in parts else None
    if status is not None and not status.get("stopped"):
        return None
    begun = (Part.SNAPSHOT, Part.PRE_COPY_PLAN, Part.COPY_PROGRESS, mirror_status.PART)
    if not any(p in begun or p.startswith(f"{Part.TIMELINE}/") for p in parts):
        return None
    steps = sorted(timeline.steps(manifest, parts), key=lambda s: s["ended"])
    seen = [_epoch(s["ended"]) for s in steps]
    for name in (events.STOPPED, events.RESUMED):
        if Part.event(name) in parts:
            seen.append(_epoch(manifest.read(Part.event(name))["at"]))
    copying = manifest.read(Part.COPY_PROGRESS) if Part.COPY_PROGRESS in parts else None
    if copying:
        seen.append(copying["at"])
    if status is not None:
        seen.append(_epoch(status["heartbeat"]))
    cutover_at = cutover_time((manifest.read(Part.PARAMS) or {}).get("params", {}).get("cutover_at"))
    return {
        "finished": manifest.has_file(REPORT) or _mirror_ended(manifest, status, parts),
        "progress_at": max(seen, default=None),
        "phase": steps[-1]["step"] if steps else None,
        "steps": {s["step"]: s["seconds"] for s in steps},  # the newest run of each
        "downtime_s": events.downtime_s(manifest),
        "copy": copying,
        "verification": _verification(manifest, parts),
        "recovery": _recovery(manifest, parts),
        "cutover_at": cutover_at.timestamp() if cutover_at else None,
    }


def _mirror_ended(manifest: Manifest, status: dict[str, Any] | None, parts: list[str]) -> bool:
    """A mirror stopped for good: asked to stop by its last move, by a user or a script, not by a
    failover (a failover's run finishes with its report)."""
    if status is None or not status.get("stopped"):
        return False
    why = (manifest.read(STOP) or {}).get("why") if STOP in parts else None
    return why not in (PLANNED, UNPLANNED)


def _verification(manifest: Manifest, parts: list[str]) -> dict[str, int] | None:
    attempts = [p for p in parts if p.startswith(f"{Part.VERIFICATION}/")]
    if not attempts:
        return None
    rows = (manifest.read(max(attempts)) or {}).get("rows", [])
    return {"partitions": len(rows), "unequal": sum(1 for r in rows if not r.get("equal"))}


def _recovery(manifest: Manifest, parts: list[str]) -> dict[str, float] | None:
    """RPO and RTO: a drill's (records the source had past the snapshot, seconds since it, seconds
    from the trigger to verified); an unplanned failover's (offsets the DR cluster lacked, the
    oldest's wait, seconds to promotion); a mirror drill's RPO at its cut."""
    if Part.DRILL in parts:
        d = manifest.read(Part.DRILL)
        return {"rpo_records": d["rpo_records"], "rpo_seconds": d["rpo_seconds"], "rto_seconds": d["rto_seconds"]}
    if Part.PROMOTED in parts:
        d = manifest.read(Part.PROMOTED)
        return {"rpo_records": d["behind_records"], "rpo_seconds": d["behind_s_max"], "rto_seconds": d["seconds"]}
    if MIRROR_CUT in parts:
        d = manifest.read(MIRROR_CUT)
        return {"rpo_records": d["rpo_records"], "rpo_seconds": d["rpo_seconds"]}
    return None


def _epoch(at: str) -> float:
    return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
