"""An application's Kafka Connect connectors moved onto the DR Connect cluster while the mirror runs
(docs/DESIGN.md §12, moving applications one at a time): a sink connector with the consumers (`move_sinks`), a source connector with
the producers (`stop_sources` before its topics are promoted, `place_sources` after). Each move,
like the window's (§3), stops the connector on the source Connect cluster, reads its offsets there,
creates it STOPPED on the DR Connect cluster with its config (bootstrap addresses pointed at the DR
cluster, the user's overrides, its secrets read again from the source worker) and those offsets,
reads them back, and brings it into the state it had on the source. The mirror keeps every record
at its source offset, so a sink connector's offsets carry over as they are, once the DR cluster
holds every record below them; a source connector's offsets are positions in its own system.
Under the mirror's renames a connector's topics and a sink's offsets take their names on the DR
cluster (`renamed.renamed_config`, `renamed_offsets`, as a migration's).

Each connector's move is recorded in the mirror's run manifest (`records.moves.connector_part`): its
state on the source before the move (a retry, which finds it stopped, keeps the first reading), and
once placed, its offsets. Every step is safe to run again: a connector placed already is left as it
is (`place_stopped`)."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.run.checks import identity
from kmigrate.run.connectors.migrate import exists_alike, place_stopped, renamed_target_config, restore_states
from kmigrate.run.connectors.secrets import restored
from kmigrate.run.cutover.snapshot import snapshot_connectors
from kmigrate.run.connectors.renamed import renamed_offsets
from kmigrate.run.mirror.moves import wait_held
from kmigrate.run.mirror.spec import mirror_renames
from kmigrate.run.records import timeline
from kmigrate.run.records.moves import connector_part as part

def stop_on_source(manifest: Manifest, source_connect: ConnectClient, names: Sequence[str], kind: str, *,
                   wait_s: float = 60.0) -> dict[str, dict[str, Any]]:
    """Each connector of `names`, which must be of `kind` (sink, source), recorded with its state on
    the source, stopped there (all asked, then waited for), and read: its snapshot entry (type,
    config without its literal secrets, offsets) by name. ConfigError naming a connector of the
    other kind, before anything is stopped."""
    records = {n: manifest.read(part(n)) or {} for n in names}
    for name in names:
        if records[name]:
            continue
        info = source_connect.info(name)  # ConnectorNotFound names it and the cluster
        if info["type"] != kind:
            raise ConfigError(f"connector {name!r} is a {info['type']} connector: a {kind} connector moves here "
                              f"({'with its consumers' if kind == 'sink' else 'with its producers'}); move it "
                              f"{'with the producers (kafka_move_producers)' if kind == 'sink' else 'with the consumers (kafka_move_consumers)'}")
        records[name] = {"connector": name, "type": kind, "state_before": source_connect.state(name),
                         "state": "moving", "began": timeline.iso(time.time())}
        manifest.replace(part(name), records[name])
    waiting = [n for n in names if records[n]["state"] != "moved"]
    for name in waiting:
        source_connect.stop(name, wait=False)
    for name in waiting:
        source_connect.wait_stopped(name, wait_s)
    return snapshot_connectors(source_connect, list(names)) if names else {}


def place_on_dr(manifest: Manifest, source_connect: ConnectClient, target_connect: ConnectClient,
                entries: Mapping[str, Mapping[str, Any]], *, target_bootstrap: str | None,
                overrides: Mapping[str, Mapping[str, Any]] | None = None, wait_s: float = 60.0,
                names: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each connector of `entries` (read by `stop_on_source`) placed STOPPED on `target_connect` with
    its offsets, then brought into the state it had on the source, and recorded as moved; the topics
    it names and a sink's offsets under their names on the DR cluster (`names`, the mirror's
    renames). Every config is checked before anything is created."""
    records = {n: manifest.read(part(n)) or {} for n in entries}
    keys = mirror_renames(manifest).connector_keys
    prepared = []
    for name, entry in sorted(entries.items()):
        config = renamed_target_config(name, entry["type"], restored(entry, name, source_connect), names or {},
                                       keys=keys.get(name, ()), target_bootstrap=target_bootstrap,
                                       overrides=(overrides or {}).get(name))
        offsets = renamed_offsets(entry["offsets"], names) if names and entry["type"] == "sink" else entry["offsets"]
        prepared.append((name, entry["type"], config, offsets, exists_alike(target_connect, name, config)))
    placed = [place_stopped(target_connect, *one) for one in prepared]
    states = restore_states(target_connect, {n: records[n]["state_before"] for n in entries}, wait_s)
    for name, entry in entries.items():
        manifest.replace(part(name), {**records[name], "state": "moved", "ended": timeline.iso(time.time()),
                                      "offsets": entry["offsets"]})
    now = {s["name"]: s["state"] for s in states}
    return [{**p, "state_now": now.get(p["name"])} for p in placed]


def move_sinks(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, source_connect: ConnectClient,
               target_connect: ConnectClient, names: Sequence[str], *, mirrored: Callable[[], set[str]],
               target_bootstrap: str | None, overrides: Mapping[str, Mapping[str, Any]] | None = None,
               wait_s: float = 300.0, poll_s: float = 0.05) -> list[dict[str, Any]]:
    """The sink connectors `names` moved: each refused before anything is stopped when it reads a
    topic the mirror does not hold (`mirrored()` names those it does: none when it has no status);
    stopped on the source; their offsets held by the DR cluster; placed there, in their state (under
    the mirror's renames, their topics and offsets under the names there)."""
    held = mirrored()
    on_dr = mirror_renames(manifest).topic_names(held)  # each topic's name on the DR cluster
    if not held:
        raise ConfigError(f"run {manifest.run_id!r} has no mirror status naming a topic: moving sink connectors "
                          f"{', '.join(names)} needs a running mirror of their topics (kafka_dr_mirror)")
    identity.record(manifest, identity.observe(source, target), what=f"move of connectors {', '.join(names)}")
    outside = sorted({t for n in names for t in _topics_read(source_connect, n) if t not in held})
    if outside:
        raise ConfigError(f"sink connectors {', '.join(names)} read topics the mirror of run {manifest.run_id!r} does "
                          f"not hold: {', '.join(outside)}; add them to the mirror's selection, then move them again "
                          "(nothing was stopped)")
    entries = stop_on_source(manifest, source_connect, names, "sink", wait_s=min(wait_s, 60.0))
    offsets = {n: {(o["partition"]["kafka_topic"], int(o["partition"]["kafka_partition"])): int(o["offset"]["kafka_offset"])
                   for o in e["offsets"]} for n, e in entries.items()}
    wait_held(target, {(on_dr[t], p): v for o in offsets.values() for (t, p), v in o.items()}, wait_s, poll_s,
              f"the DR cluster to hold every record below the offsets of {', '.join(names)}", "move them again")
    return place_on_dr(manifest, source_connect, target_connect, entries, target_bootstrap=target_bootstrap,
                       overrides=overrides, names=on_dr)


def _topics_read(connect: ConnectClient, name: str) -> set[str]:
    """The topics a sink connector reads: its `topics` setting, and those its offsets name."""
    config = connect.config(name)
    topics = {t.strip() for t in config.get("topics", "").split(",") if t.strip()}
    return topics | {o["partition"]["kafka_topic"] for o in connect.offsets(name)}
