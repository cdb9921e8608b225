"""The cutover window's two ends (docs/DESIGN.md §3): the selected connectors stopped on the source
(its start), and each connector on the target in the state it had on the source (its end, after
which the run is finished: `events.finished`). Each end is recorded once as the run's event."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest, Part
from kmigrate.run.connectors import migrate as connector_steps
from kmigrate.run.cutover.groups import check_groups_unchanged
from kmigrate.run.records import events
from kmigrate.run.records.snapshot import read_snapshot


def begin_stop(manifest: Manifest, source_connect: ConnectClient | None, names: Sequence[str],
               quiesce_s: float | None = None) -> Callable[[], bool]:
    """The window opens without waiting for the connectors to stop: each one's state recorded while
    it still runs, the run's "connectors stopped" event, then each asked to stop in the background.
    Returns the check the quiesce waits on (`stopping`), True once all have stopped. A worker older
    than 3.5 pauses them instead, waited for here."""
    if source_connect is None or not names:
        events.mark(manifest, events.STOPPED)
        return lambda: True
    recorded = connector_steps.record_states(source_connect, names, manifest)
    events.mark(manifest, events.STOPPED)
    if recorded.get("stopped_by") == "pause":
        connector_steps.stop_connectors(source_connect, names, manifest, quiesce_s=quiesce_s)
        return lambda: True
    return connector_steps.ask_to_stop(source_connect, names)


def stopping(manifest: Manifest, source_connect: ConnectClient | None, names: Sequence[str]) -> Callable[[], bool]:
    """For connectors a run asked to stop before (a retry's check, `begin_stop` gave the first): True
    once all have stopped with no task left (ConnectTimeout after a minute). A worker older than 3.5
    pauses them instead, and that was waited for already."""
    paused = (manifest.read(Part.CONNECTOR_STATES) or {}).get("stopped_by") == "pause"
    if source_connect is None or not names or paused:
        return lambda: True
    return connector_steps.stopped_check(source_connect, names)


def resume_on_target(manifest: Manifest, source: ClusterConfig,
                     target_connect: ConnectClient | None) -> list[dict[str, Any]]:
    """The window closes: once each snapshot group is confirmed still stopped on the source with its
    snapshot offsets (`check_groups_unchanged`, GroupActive otherwise), each snapshot connector is
    brought into the state it had on the source before the run (RUNNING, PAUSED or STOPPED) on the
    target, what was resumed is recorded (part resumed-connectors, the first time kept) and the
    run's "connectors resumed" event marks it finished. Returns what this call resumed. The caller
    checks first that the source was not written to after the snapshot (`check_source_at_snapshot`)."""
    check_groups_unchanged(manifest, source)
    names = sorted(read_snapshot(manifest)["connectors"])
    states = connector_steps.states_before(manifest) if target_connect and names else {}
    resumed = connector_steps.restore_states(target_connect, {n: states[n] for n in names}) if states else []
    manifest.get_or_create(Part.RESUMED, lambda: {"connectors": resumed})
    events.mark(manifest, events.RESUMED)
    return resumed


def resumed(manifest: Manifest) -> list[dict[str, Any]]:
    """What the run resumed on the target when it finished, as recorded; [] before that."""
    return (manifest.read(Part.RESUMED) or {"connectors": []})["connectors"]
