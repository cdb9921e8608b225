"""The consumer groups moved onto a mirror's DR cluster one application at a time (the moves
themselves: kmigrate.run.mirror.moves), recorded in the mirror's run manifest: a part a group, so
that two moves at once never write one part. Read by the mirror's driver (it syncs a moved group no
more) and by a failover's snapshot (its consumers run on the DR cluster already: the failover leaves
the group as it is there)."""
from __future__ import annotations

import hashlib
from typing import Any

from kmigrate.manifest import Manifest

MOVED = "moved-groups"  # a part a group: {"group", "state": "moving" | "moved", "began", "ended", "offsets"}


def part(group: str) -> str:
    """The part of the run manifest that records `group`'s move."""
    return f"{MOVED}/{hashlib.blake2b(group.encode(), digest_size=12).hexdigest()}"


def moved_groups(manifest: Manifest) -> dict[str, dict[str, Any]]:
    """The groups whose move has begun or ended, by name."""
    out = {}
    for name in manifest.parts():
        if name.startswith(f"{MOVED}/"):
            record = manifest.read(name) or {}
            if record.get("group") is not None:
                out[record["group"]] = record
    return out
