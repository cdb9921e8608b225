"""A DR drill of a running mirror (kafka_dr_drill with `mirror_run`; docs/DESIGN.md §12): the
standby verified at a consistent cut, and a failover's figures measured, without disturbing the
source or the mirror. Nothing is written to the source, nor to the mirrored topics or groups.

1. The drill's snapshot (taken over the mirror's selection, the source live) is the cut: each
   partition's last stable offset, each group's committed offsets, the mirror's status then (its
   lag: what an unplanned failover would lose at that moment, the RPO).
2. `reach_cut` waits until the DR cluster holds every partition up to the cut (committed) and each
   group's offsets there are at least the cut's (the mirror copies them as it goes, never past the
   DR end: an offset past the cut's end counts as the end); the drill's
   verify job then compares every partition record by record up to the cut.
3. `dry_connectors` places the connectors the mirror keeps on the DR Connect cluster, STOPPED, with
   their offsets read back, and removes them: what a failover would start, shown to work.
4. The RTO measured is the trigger to all of that: what a failover needs before the applications
   can start on the DR cluster.

A mirror that renames (a consolidation's: `orders` kept on the DR cluster as `a.orders`) is read
there under its names (its spec's `renames`): the cut's partitions and the groups' offsets by their
DR names, compared under the source's; the connectors' topics and a sink's offsets renamed as a
migration's are (kmigrate.run.connectors.renamed)."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, ConnectorNotFound, KmigrateError
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.pool import shared_admin
from kmigrate.manifest import Manifest
from kmigrate.renames import from_target, partitions_there
from kmigrate.run.checks.request import STALE_AFTER_S, RunRequest
from kmigrate.run.connectors.migrate import place_stopped
from kmigrate.run.records.snapshot import read_snapshot
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import kept, offsets_on_dr, on_dr
from kmigrate.run.mirror.spec import read_spec
from kmigrate.run.records import timeline

CUT = "drill/mirror-cut"  # the cut reached on the DR cluster: when, the mirror's lag at the cut, the groups
Key = tuple[str, int]


def overridable(request: RunRequest) -> tuple[list[str] | None, dict[str, str]]:
    """The connectors a run's `connector_overrides` may name, and how `check_overrides` says where
    they come from and the way out: a migration's `connectors`; a drill of a mirror (`mirror_run`)
    has no `connectors` param and places the connectors its mirror keeps (its spec's), so those;
    a drill of its own copy places none."""
    if request.connectors is not None or not request.state_location:
        return None if request.connectors is None else list(request.connectors), {}
    if not request.mirror_run:
        return [], {"among": "the connectors a drill without mirror_run places",
                    "fix": "a drill of its own copy moves no connector: drop connector_overrides, or drill a running "
                           "mirror (mirror_run) that keeps that connector"}
    mirror = request.mirror_run
    return list(read_spec(Manifest(request.state_location, mirror)).connectors), {
        "among": f"the connectors the mirror of run {mirror!r} keeps, which its drill places",
        "fix": f"fix the name or drop its overrides; a drill places its mirror's connectors, so to drill another "
               f"one, start a kafka_dr_mirror run with it in connectors and drill that run"}


def cut_ends(snapshot: Mapping[str, Any]) -> dict[Key, int]:
    """The drill's cut: each snapshot partition's end."""
    return {(t, p["partition"]): p["end"] for t, e in snapshot["topics"].items() for p in e["partitions"]}


def check_slots_left(mirror: Manifest, remote: str | None, param: str = "spark_connect_conn_id") -> None:
    """ConfigError when the drill's Spark jobs would go to the Spark Connect server at `remote` and
    the running mirror holds every task slot there: they would wait for the mirror's term to end."""
    held = mirror_status.holds_every_slot(mirror, remote)
    if held:
        raise ConfigError(
            f"the mirror of run {mirror.run_id} holds all {held['slots']} task slots of the Spark Connect server "
            f"{held['server']} with its {held['tasks']} long-running tasks: the drill's verify job would wait there "
            f"until the mirror's term ends. Run the drill's Spark jobs on another server ({param}), or restart the "
            f"mirror with spark_parallelism below {held['slots']} (by default it takes half the slots)")


def reach_cut(manifest: Manifest, mirror: Manifest, target: ClusterConfig, *, timeout_s: float = 600.0,
              stale_after_s: float = STALE_AFTER_S, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Wait until the DR cluster holds the drill's cut (its snapshot's ends, committed; its groups'
    offsets at least the cut's); the part CUT (again for a retry). ConfigError when the mirror does
    not run (its heartbeat older than `stale_after_s`) or the DR cluster stays short of the cut for
    `timeout_s`, naming the partitions and groups behind."""
    done = manifest.read(CUT)
    if done is not None:
        return done
    snapshot = read_snapshot(manifest)
    status = mirror_status.read(mirror)
    age = mirror_status.heartbeat_age(status)
    if status is None or status.get("stopped") or age is None or age > stale_after_s:
        raise ConfigError(f"the mirror of run {mirror.run_id} does not run (its last status: "
                          f"{'none' if status is None else status['heartbeat']}); a drill of a mirror needs it "
                          "running: start kafka_dr_mirror, or drill without mirror_run (a copy of its own)")
    cut = cut_ends(snapshot)
    # the mirror's names on the DR cluster: its partitions and groups read there by them
    renames = read_spec(mirror).renames
    names = renames.topic_names({t for t, _ in cut})
    keys = partitions_there(cut, names)
    # a group's offset past its partition's end (a commit may say so) stands at the end, as the mirror copies it
    wanted = {(g, o["topic"], o["partition"]): min(o["offset"], cut.get((o["topic"], o["partition"]), o["offset"]))
              for g, e in snapshot["groups"].items() for o in e["offsets"]}
    began, deadline = time.monotonic(), time.monotonic() + timeout_s
    while True:
        with shared_admin(target) as admin:
            held = {keys[k]: end for k, end in admin.stable_ends(list(keys), retry=True).items()}
            committed = {(g, t, p): offset for g in {k[0] for k in wanted} for (t, p), offset in from_target(
                {k: c.offset for k, c in admin.committed(renames.group(g)).items()}, names).items()}
        short = {k: (held[k], end) for k, end in cut.items() if held[k] < end}
        groups_short = {k: (committed.get(k, -1), o) for k, o in wanted.items() if committed.get(k, -1) < o}
        if not short and not groups_short:
            break
        if time.monotonic() > deadline:
            raise ConfigError(
                f"the DR cluster did not reach the drill's cut in {timeout_s:.0f}s: "
                + "; ".join([f"{_named(t, names)}[{p}] at {h} of {e}" for (t, p), (h, e) in sorted(short.items())[:10]]
                            + [f"group {_named(g, renames.group_names([g]))} {_named(t, names)}[{p}] at {h} of {o}"
                               for (g, t, p), (h, o) in sorted(groups_short.items())[:10]])
                + "; check the mirror's status (mirror-status) and retry")
        time.sleep(0.2)
    rpo_records, rpo_seconds = mirror_status.lag(p for p in status["partitions"] if (p["topic"], p["partition"]) in cut)
    reached = {"at": timeline.iso(time.time()), "waited_s": round(time.monotonic() - began, 3),
               "mirror_status": status["heartbeat"], "partitions": len(cut), "groups": len({k[0] for k in wanted}),
               "rpo_records": rpo_records, "rpo_seconds": rpo_seconds}
    manifest.write_once(CUT, reached)
    say(f"the DR cluster holds the cut ({len(cut)} partitions, {reached['groups']} groups) after "
        f"{reached['waited_s']} s; the mirror was {reached['rpo_records']} offsets, {reached['rpo_seconds']} s behind")
    return reached


def _named(name: str, names: Mapping[str, str]) -> str:
    """A source topic's or group's name, with its name on the DR cluster when the mirror renames it."""
    return name if names.get(name, name) == name else f"{name} (on the DR cluster {names[name]})"


def dry_connectors(mirror: Manifest, dr_connect: ConnectClient | None, dr_ends: Mapping[Key, int], *,
                   dr_bootstrap: str | None = None, overrides: Mapping[str, Mapping[str, Any]] | None = None,
                   say: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """The connectors the mirror keeps placed on `dr_connect` STOPPED with their offsets (read back),
    then deleted: what a failover would start. A connector of that name on the DR Connect cluster
    already is refused, and left alone. `dr_ends`: the DR cluster's ends a sink's offsets are capped
    at, by the source's (topic, partition). Under the mirror's renames, the topics each config names
    and a sink's offsets take their DR names (`renamed_config`, `renamed_offsets`, as a migration's
    connectors do), every config prepared before any connector is placed."""
    reading = kept(mirror, dr_connect, "drill")
    if reading is None:
        return []
    there = set(dr_connect.connectors())
    taken = sorted(set(reading["connectors"]) & there)
    if taken:
        raise ConfigError(f"connectors {', '.join(taken)} exist on the DR Connect cluster ({dr_connect.url}) already: "
                          "a dry failover would not touch them. Delete them there if they are leftovers, then retry")
    renames = read_spec(mirror).renames
    names = renames.topic_names({t for t, _ in dr_ends})
    prepared = []
    for name, entry in sorted(reading["connectors"].items()):
        prepared.append((name, entry, on_dr(name, entry, dr_bootstrap, overrides, names, renames.connector_keys),
                         offsets_on_dr(entry, dr_ends, names)))
    out = []
    for name, entry, config, offsets in prepared:
        began = time.monotonic()
        try:
            placed = place_stopped(dr_connect, name, entry["type"], config, offsets, False)
        finally:
            try:
                dr_connect.delete(name)
            except (ConnectorNotFound, KmigrateError) as exc:  # said; the drill's result names it too
                say(f"connector {name}: the dry failover could not remove it from the DR Connect cluster ({exc}); "
                    "delete it there")
        out.append({"name": name, "type": entry["type"], "state_on_source": entry["state"],
                    "offsets": placed.get("offsets", []), "placed_s": round(time.monotonic() - began, 3),
                    "read_at": reading["read_at"]})
    say(f"dry failover of {len(out)} connectors: created stopped on the DR Connect cluster with their offsets, "
        "then removed")
    return out
