"""The end of a migration done one application at a time (docs/DESIGN.md §12, moving applications one
at a time): once every topic the mirror copied is promoted on the DR cluster, and every consumer
group it synced and every connector moved with an application is moved, the mirror has nothing left
to do. The move that leaves nothing behind asks the mirror to stop, waits until it has, and releases
the run's claims on the DR cluster's topics: they are the applications' now, and another run may
take them. Until then, what is left is named (the board shows it too)."""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kmigrate.claims.runs import release_topics
from kmigrate.config import ClusterConfig
from kmigrate.manifest import Manifest
from kmigrate.run.checks.request import STALE_AFTER_S
from kmigrate.run.mirror.board import board, left
from kmigrate.run.mirror.failover import stop_mirror

log = logging.getLogger(__name__)

WHY = "the last application moved: every topic promoted, every group and connector moved"


def end_if_complete(manifest: Manifest, target: ClusterConfig, *, wait_s: float = 300.0,
                    stale_after_s: float = STALE_AFTER_S, say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """After a move: when nothing is left on the source, the mirror asked to stop (once: a retry finds
    the request) and waited for, as a failover waits for it (stopped, or beating no more for
    `stale_after_s`), then the run's claims on the DR cluster released. A row: complete or not, what
    is left, whether claims were released."""
    b = board(manifest)
    rest = left(b)
    if rest or not b["topics"]:
        say(f"{len(rest)} still on the source ({', '.join(rest[:10])}{', ...' if len(rest) > 10 else ''}): "
            "the mirror goes on")
        return {"complete": False, "left": rest}
    stop_mirror(manifest, WHY, stale_after_s=stale_after_s, timeout_s=wait_s, say=say,
                again="move again: the moves are done, and this releases the run's claims")
    released = release_topics(target, manifest.run_id, deployment=manifest.state_location)
    say(f"every topic of run {manifest.run_id!r} is promoted and every group and connector moved: the mirror "
        f"stopped{', and its claims on the DR cluster are released' if released else ''}")
    return {"complete": True, "left": [], "claims_released": released}
