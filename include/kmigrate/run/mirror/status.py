"""A running mirror's status part (`mirror-status`, replaced every round): its heartbeat, and how
far behind the DR cluster is. What the lag means: a round reads the source's last stable offsets
at its start (`as_of`) and copies up to them, so when it ends the DR cluster holds every record
the source had decided at `as_of` (failed partitions aside, named). A partition's `behind_records`
is what the DR cluster lacked when the round began; those records were decided after the previous
round began, so `behind_s`, the time from there to this round's end, bounds how long any of them
waited. The DAG's sensor follows the heartbeat; the report and the UI show the rest."""
from __future__ import annotations

import datetime
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from kmigrate.manifest import Manifest
from kmigrate.run.report import timeline

PART = "mirror-status"
Key = tuple[str, int]


def of_round(number: int, started: float, ended: float, previous_start: float | None,
             source: Mapping[Key, tuple[int, int]], target: Mapping[Key, tuple[int, int]],
             mirrored: Mapping[Key, int], failed: Mapping[Key, str], groups: list[dict[str, Any]],
             totals: Mapping[str, int], own_ends: Mapping[Key, int] | None = None,
             asked: Mapping[Key, list[int]] | None = None) -> dict[str, Any]:
    """The status after round `number` (`source`/`target`: each partition's log start and end when
    it began; `mirrored`: the DR cluster's ends after it; `own_ends`: where the mirror's own copies
    left them, and `asked`: the copies asked for and not reported done, both kept for a restart)."""
    partitions = []
    waited = None if previous_start is None else round(ended - previous_start, 3)
    for key in sorted(source):
        behind = max(0, source[key][1] - target[key][1])
        partitions.append({"topic": key[0], "partition": key[1], "source_end": source[key][1],
                           "dr_end": mirrored[key], "behind_records": behind,
                           "behind_s": (waited if behind else 0.0), "error": failed.get(key),
                           "own_end": (own_ends or {}).get(key), "asked": (asked or {}).get(key)})
    known = [p["behind_s"] for p in partitions if p["behind_s"] is not None]
    return {"round": number, "as_of": timeline.iso(started), "heartbeat": timeline.iso(ended),
            "round_s": round(ended - started, 3), "host": socket.gethostname(), "pid": os.getpid(),
            "behind_records": sum(p["behind_records"] for p in partitions),
            "behind_s_max": max(known, default=0.0), "failed_partitions": len(failed),
            "partitions": partitions, "groups": groups, "totals": dict(totals), "stopped": False, "error": None}


def write(manifest: Manifest, status: Mapping[str, Any], *, stopped: bool = False) -> None:
    if status:
        manifest.replace(PART, {**status, "stopped": stopped})


def read(manifest: Manifest) -> dict[str, Any] | None:
    return manifest.read(PART)


def heartbeat_age(status: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds since the mirror's last round ended; None before its first."""
    if not status:
        return None
    beat = datetime.datetime.fromisoformat(status["heartbeat"].replace("Z", "+00:00"))
    return (now if now is not None else time.time()) - beat.timestamp()
