"""What a failover of a mirrored run needs of its mirror (docs/DESIGN.md §12): the mirror stopped
before the failover's own copy writes where it wrote (the failover moves the mirror's selection:
`spec.with_mirror_selection`)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kmigrate.errors import MirrorStillRunning
from kmigrate.manifest import Manifest
from kmigrate.run.checks.request import STALE_AFTER_S
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror import timings
from kmigrate.run.mirror.spec import read_spec
from kmigrate.run.mirror.term import request_stop


PLANNED = "planned failover"  # why the mirror is asked to stop (its STOP part) by kafka_dr_failover


def check_stale_after(manifest: Manifest, stale_after_s: Any) -> None:
    """A failover takes the run's mirror for stopped once its heartbeat is `stale_after_s` old; a limit
    below what a healthy mirror's heartbeat can reach (`timings.min_stale_after_s` of its interval)
    would take a running mirror for stopped, and the failover would write beside it. ConfigError
    naming both and the way out."""
    timings.check_stale_after(read_spec(manifest).interval_s, stale_after_s, "stopped-after limit",
                              f"a failover of run {manifest.run_id} would take it for stopped and write beside it")


def stop_mirror(manifest: Manifest, why: str, *, stale_after_s: float = STALE_AFTER_S, timeout_s: float = 120.0,
                say: Callable[[str], None] = print, again: str = "retry the failover (the steps done are kept)"
                ) -> dict[str, Any] | None:
    """Ask the run's mirror to stop and wait until it has (its status says so) or beats no more (its
    heartbeat older than `stale_after_s`: it died, and its process, if it lives, writes nothing
    until it beats again). Returns its last status (None: it never ran a round). Raises
    MirrorStillRunning, naming its process and that the caller is done `again`, when it still beats
    after `timeout_s`; ConfigError, before anything is asked, for a `stale_after_s` a running
    mirror's heartbeat can reach (`check_stale_after`)."""
    check_stale_after(manifest, stale_after_s)
    request_stop(manifest, why)
    deadline = time.monotonic() + timeout_s
    while True:
        status = mirror_status.read(manifest)
        if status is None:
            say("the mirror never ran a round")
            return None
        age = mirror_status.heartbeat_age(status)
        if status["stopped"] or age > stale_after_s:
            say(f"the mirror stopped at round {status['round']}" if status["stopped"] else
                f"the mirror beats no more (its last round, {status['round']}, ended {age:.0f}s ago)")
            return status
        if time.monotonic() > deadline:
            raise MirrorStillRunning(
                f"the mirror of run {manifest.run_id} (process {status['pid']} on {status['host']}) still runs "
                f"{timeout_s:.0f}s after it was asked to stop; stop that process, then {again}")
        time.sleep(0.2)
