"""A run's events (connectors stopped, connectors resumed), each recorded once, and the downtime
between them."""
from __future__ import annotations

import datetime
from typing import Any

from kmigrate.manifest import Manifest, Part

STOPPED = "connectors-stopped"
RESUMED = "connectors-resumed"


def finished(manifest: Manifest) -> bool:
    """Whether the run has resumed on the target: from then on the target is in use, and a re-run
    of the run changes nothing there or on the source (no connector stopped, created, patched or
    resumed again, no group offset written again)."""
    return manifest.exists(Part.event(RESUMED))


def mark(manifest: Manifest, event: str) -> dict[str, Any]:
    """The first time `event` happened in this run (a re-run keeps the first)."""
    return manifest.get_or_create(Part.event(event), lambda: {
        "at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")})


def downtime_s(manifest: Manifest) -> float | None:
    stopped, resumed = manifest.read(Part.event(STOPPED)), manifest.read(Part.event(RESUMED))
    if not stopped or not resumed:
        return None
    parse = datetime.datetime.fromisoformat
    return round((parse(resumed["at"]) - parse(stopped["at"])).total_seconds(), 3)
