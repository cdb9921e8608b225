"""The cutover window's two ends (docs/DESIGN.md §3): the selected connectors stopped on the source
(its start), and each connector on the target in the state it had on the source (its end, after
which the run is finished: `events.finished`). Each end is recorded once as the run's event."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest, Part
from kmigrate.run.connectors import migrate as connector_steps
from kmigrate.run.cutover import events
from kmigrate.run.cutover.groups import check_groups_unchanged
from kmigrate.run.cutover.snapshot import read_snapshot


def stop_on_source(manifest: Manifest, source_connect: ConnectClient | None, names: Sequence[str],
                   quiesce_s: float | None = None) -> dict[str, str]:
    """The window opens: the run's "connectors stopped" event (its first time is kept), then each
    named connector stopped on the source (`connectors.migrate.stop_connectors`). Returns each one's
    state before the run stopped it; {} when the run selects no connector (`source_connect` None)."""
    events.mark(manifest, events.STOPPED)
    if source_connect is None:
        return {}
    return connector_steps.stop_connectors(source_connect, names, manifest, quiesce_s=quiesce_s)


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
