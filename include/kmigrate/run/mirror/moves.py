"""An application's consumer groups moved onto the DR cluster while the mirror runs (docs/DESIGN.md §12,
moving applications one at a time): the rest of the workload keeps running on the source, and the
mirror, which keeps every record at the source's offset, lets the moved consumers go on on the DR cluster at exactly the
offsets they left.

A move of a group (`move_group`), each step safe to run again:
1. recorded as begun in the mirror's run manifest (`kmigrate.run.records.moves`): the mirror's driver
   stops syncing the group's offsets from its next status round on, and the move waits
   for a round that began after the record, so that no sync of the mirror lands after the move's
   own write;
2. the group has no member left on the source (its owner stopped the application; a member that
   leaves without saying so is waited for until the broker expires it, as the quiesce waits);
3. its committed offsets read on the source: each on a partition the mirror holds (a group that
   reads a topic outside the mirror's selection is refused by name);
4. the DR cluster holds every record below each of them (the mirror's copies reach them);
5. the offsets, with their metadata, written on the DR cluster exactly, refused while the group has
   members there (started too early: its consumers own the offsets there), read back;
6. recorded as moved, with the offsets written: the owner starts the application on the DR
   cluster. Nothing is written on the source; the clusters are the mirror's own (`identity`).

A moved group moves back (`move_group_back`) while none of its topics is promoted: its offsets on
the DR cluster written on the source, the one write on the source a move makes, asked by its owner.

A mirror that renames (a consolidation's: its topics and groups under other names on the DR cluster,
`spec.mirror_renames`) moves each group to its id there, its offsets onto the topics' names there,
and back from them; its records keep the source's names."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, GroupActive, KmigrateError, OffsetsNotApplied
from kmigrate.kafka import ends
from kmigrate.kafka.group_admin import Committed
from kmigrate.kafka.pool import shared_admin
from kmigrate.manifest import Manifest
from kmigrate.run.checks import identity
from kmigrate.run.mirror import status as mirror_status
from kmigrate.renames import Renames, from_target
from kmigrate.run.mirror.spec import mirror_renames
from kmigrate.run.records import moves as moved
from kmigrate.run.records import timeline
from kmigrate.run.records.moves import promoted_topics

log = logging.getLogger(__name__)

Key = tuple[str, int]
READ_TIMEOUT_S = 10.0


class MirrorBehind(KmigrateError):
    """The DR cluster does not hold a moved group's records yet (the mirror is behind, or stopped)."""


def on_dr(offsets: Mapping[Key, Any], renames: Renames) -> dict[Key, Any]:
    """`offsets` (by the source's partitions) keyed by the partitions' names on the DR cluster."""
    return {(renames.topic(t), p): value for (t, p), value in offsets.items()}


def named(group: str, dr_group: str) -> str:
    """A group as a message names it: its id, and its id on the DR cluster where that differs."""
    return repr(group) + (f" (on the DR cluster {dr_group!r})" if dr_group != group else "")


def move_group(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, group: str, *,
               wait_s: float = 300.0, poll_s: float = 0.2, say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Move consumer group `group` of the mirror run `manifest` onto the DR cluster `target` (the
    steps above); a row: the group, its partitions, how long the move waited for the group to stop
    and for the mirror (`waited_s`), and how long from the group's last member gone to its offsets
    written on the DR cluster (`window_s`). Each wait gives up after `wait_s`, naming what it waited
    for and the way out; a move given up is tried again as it is. Under the mirror's renames the
    group moves to its id on the DR cluster, onto the topics' names there."""
    renames = mirror_renames(manifest)
    dr_group = renames.group(group)
    part = moved.part(group)
    record = manifest.read(part) or {}
    if record.get("state") == moved.BACK:  # moved back to the source since: moved anew
        record = {}
    status = mirror_status.read(manifest)
    if status is None:
        raise ConfigError(f"run {manifest.run_id!r} has no mirror status: moving consumer group {group!r} needs a "
                          "running mirror of its topics (kafka_dr_mirror); start it, or name its run")
    refused = (status.get("not_mirrored") or {}).get("groups", {})
    if group in refused and record.get("state") != "moved":  # its id there may be another group's: never written
        raise ConfigError(f"consumer group {group!r} is not mirrored by run {manifest.run_id!r}: its id on the DR "
                          f"cluster, {dr_group!r}, is refused ({refused[group]}); nothing was changed. Give it an id "
                          "of its own in the mirror's group_renames (a mirror run started anew) to move it")
    identity.record(manifest, identity.observe(source, target), what=f"move of consumer group {group!r}")
    if record.get("state") == "moved":
        _check_written(target, dr_group, on_dr(_offsets(record["offsets"]), renames))
        say(f"consumer group {group!r} was moved already ({len(record['offsets'])} partitions): start it on the "
            "DR cluster")
        return {"group": group, "partitions": len(record["offsets"]), "moved_before": True}
    began = time.monotonic()
    if not record:  # a group that cannot move is refused before the mirror stops syncing it
        with shared_admin(source, READ_TIMEOUT_S) as source_admin:
            _check_inside(manifest.run_id, status, group, source_admin.committed(group))
        record = {"group": group, "state": "moving", "began": timeline.iso(time.time()),
                  **({"dr_group": dr_group} if dr_group != group else {})}
        manifest.replace(part, record)
    round_now = status.get("round") or 0
    wait_for(lambda: (mirror_status.read(manifest) or {}).get("round", 0) >= round_now + 2, wait_s, poll_s,
          f"the mirror of run {manifest.run_id!r} to begin a status round after the move of {group!r} began (it "
          "syncs the group no more from then on)", lambda: "is the mirror running? Its status names its last round",
          ConfigError)
    with shared_admin(source, READ_TIMEOUT_S) as source_admin, shared_admin(target, READ_TIMEOUT_S) as dr_admin:
        _wait_no_members(source_admin, group, "the source", wait_s, poll_s,
                         "; a member that left without saying so is gone once the broker's session timeout passes")
        gone = time.monotonic()
        committed = source_admin.committed(group)
        status = mirror_status.read(manifest) or {}
        _check_inside(manifest.run_id, status, group, committed)
        promoted = sorted({r["topic"] for r in status.get("promoted", [])} & {t for t, _ in committed})
        if promoted:
            say(f"consumer group {group!r} reads {', '.join(promoted)}, promoted on the DR cluster already: it goes on "
                "there at the offsets it left on the source, where nothing new was written since")
        there = on_dr(committed, renames)  # the offsets as the DR cluster names their partitions
        wait_held(target, {k: c.offset for k, c in there.items()}, wait_s, poll_s,
                  f"the DR cluster to hold every record below consumer group {group!r}'s offsets", "move the group again",
                  retry=False)
        members = dr_admin.live_members(dr_group)
        if members:
            raise GroupActive(f"consumer group {named(group, dr_group)} has members on the DR cluster already "
                              f"({', '.join(members)}): its consumers there own its offsets. Stop them, then move the "
                              "group again; their offsets are replaced by the source's", group=group)
        dr_admin.alter_group_offsets(dr_group, there)
    window_s = time.monotonic() - gone
    _check_written(target, dr_group, there, exact=True)
    manifest.replace(part, {**record, "state": "moved", "ended": timeline.iso(time.time()), "window_s": round(window_s, 3),
                            "offsets": [[t, p, c.offset, c.metadata] for (t, p), c in sorted(committed.items())]})
    say(f"consumer group {named(group, dr_group)}: {len(committed)} partitions' offsets written on the DR cluster as "
        f"the source has them ({window_s:.2f} s after its last member left): start it on the DR cluster")
    return {"group": group, "partitions": len(committed), "waited_s": round(gone - began, 3),
            "window_s": round(window_s, 3), "moved_before": False}


def _check_inside(run_id: str, status: Mapping[str, Any], group: str, committed: Mapping[Key, Committed]) -> None:
    """A group moves whole: refused when it has no committed offset, or one on a partition the
    mirror does not hold as of its `status` (what it reads there would be lost), naming the topics
    and the way out."""
    if not committed:
        raise ConfigError(f"consumer group {group!r} has no committed offset on the source: nothing to move; "
                          "check its name")
    mirrored = {(p["topic"], p["partition"]) for p in status.get("partitions", [])}
    promoted = {r["topic"] for r in status.get("promoted", [])}  # on the DR cluster for good: held there too
    outside = sorted({key[0] for key in committed if key not in mirrored and key[0] not in promoted})
    if outside:
        raise ConfigError(f"consumer group {group!r} has offsets on topics the mirror of run {run_id!r} "
                          f"does not hold: {', '.join(outside)}; add them to the mirror's selection, or delete the "
                          "group's offsets on them, then move it again")


def _offsets(rows: list[list[Any]]) -> dict[Key, Committed]:
    return {(t, p): Committed(offset, metadata) for t, p, offset, metadata in rows}


def _check_written(target: ClusterConfig, group: str, wanted: Mapping[Key, Committed], *, exact: bool = False) -> None:
    """The group's offsets on the DR cluster read back: `exact`, each offset and its metadata as written
    (right after the write); else each offset not below it (a move run again: a consumer started there
    since may have moved them on)."""
    with shared_admin(target, READ_TIMEOUT_S) as admin:
        now = admin.committed(group)

    def held(key: Key, want: Committed) -> bool:
        return key in now and (now[key] == want if exact else now[key].offset >= want.offset)

    wrong = [f"{t}[{p}]: {tuple(now[(t, p)]) if (t, p) in now else 'none'}, not {tuple(c)}"
             for (t, p), c in sorted(wanted.items()) if not held((t, p), c)]
    if wrong:
        raise OffsetsNotApplied(f"consumer group {group!r} on the DR cluster: " + "; ".join(wrong[:10])
                                + "; move it again")


def _wait_no_members(admin: Any, group: str, where: str, wait_s: float, poll_s: float, more: str = "") -> None:
    """Until `group` has no member on the cluster of `admin` (`where`); GroupActive naming its members
    after `wait_s`, with `more` said of the way out."""
    members: list[list[str] | None] = [None]

    def stopped() -> bool:
        members[0] = admin.live_members(group)
        return members[0] is None

    wait_for(stopped, wait_s, poll_s, f"consumer group {group!r} to have no member on {where}",
             lambda: f"stop its application on {where} (members now: {', '.join(members[0] or [])}){more}",
             lambda message: GroupActive(message, group=group))


def wait_held(target: ClusterConfig, wanted: Mapping[Key, int], wait_s: float, poll_s: float, what: str, again: str,
              *, retry: bool = True) -> None:
    """Until the DR cluster `target` holds every record below each offset of `wanted` (the mirror's
    copies reach them); MirrorBehind after `wait_s`, naming `what` was waited for, how far behind the
    mirror is, and that the move is done `again` once it caught up."""
    behind: dict[Key, int] = {}

    def held() -> bool:
        if not wanted:
            return True
        (dr_ends,) = ends.read(target, list(wanted), (ends.HIGH,), READ_TIMEOUT_S, retry=retry)
        behind.clear()
        behind.update({k: v - dr_ends[k] for k, v in wanted.items() if dr_ends[k] < v})
        return not behind

    wait_for(held, wait_s, poll_s, what, lambda: f"the mirror is behind on {len(behind)} partitions "
             f"({sum(behind.values())} records); see its status, and {again} once it caught up", MirrorBehind)


def wait_for(done: Callable[[], bool], wait_s: float, poll_s: float, what: str, way_out: Callable[[], str],
          failure: Callable[[str], Exception]) -> None:
    """Poll `done` until it holds; after `wait_s`, `failure` naming `what` was waited for and the way out."""
    deadline = time.monotonic() + wait_s
    while not done():
        if time.monotonic() > deadline:
            raise failure(f"waited {wait_s:.0f} s for {what}; {way_out()}")
        time.sleep(poll_s)


def move_group_back(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, group: str, *,
                    wait_s: float = 300.0, poll_s: float = 0.2, say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Move consumer group `group`, moved onto the DR cluster, back to the source while none of its
    topics is promoted (the mirror still copies them, so the source holds every record the group read
    on the DR cluster, at the same offsets): once it has no member on the DR cluster (its owner stopped
    the application there), its offsets there, with their metadata, are written on the source exactly
    (refused while it has members on the source) and read back; the move is recorded as back, and
    the mirror syncs the group again. The only write a move makes on the source: the group's own
    offsets, which its owner asked back, on the mirror's topics (under the mirror's renames, from its
    id and the topics' names on the DR cluster; an offset on a topic the mirror does not hold stays
    there, named). A row: the group, its partitions, the window."""
    renames = mirror_renames(manifest)
    dr_group = renames.group(group)
    part = moved.part(group)
    record = manifest.read(part) or {}
    if record.get("state") not in ("moving", "moved"):  # (moved.BACK: moved back already)
        raise ConfigError(f"consumer group {group!r} was not moved onto the DR cluster of run {manifest.run_id!r} "
                          f"({record.get('state') or 'no move recorded'}): it runs on the source; check its name")
    topics = sorted({t for t, *_ in record.get("offsets", [])})
    promoted = sorted(set(topics) & set(promoted_topics(manifest)))
    if promoted:
        raise ConfigError(f"consumer group {group!r} reads {', '.join(promoted)}, promoted on the DR cluster: the "
                          "source no longer holds what is written there, so the group stays on the DR cluster "
                          "(a failback of the mirror moves it back with its topics)")
    identity.record(manifest, identity.observe(source, target), what=f"move back of consumer group {group!r}")
    held = renames.topic_names(mirror_status.mirrored_topics(mirror_status.read(manifest) or {}))
    with shared_admin(source, READ_TIMEOUT_S) as source_admin, shared_admin(target, READ_TIMEOUT_S) as dr_admin:
        _wait_no_members(dr_admin, dr_group, "the DR cluster", wait_s, poll_s)
        gone = time.monotonic()
        on_dr_now = dr_admin.committed(dr_group)
        committed = from_target(on_dr_now, held)
        if others := sorted({t for t, _ in on_dr_now} - set(held.values())):
            say(f"consumer group {named(group, dr_group)} has offsets on the DR cluster on topics the mirror does not "
                f"hold ({', '.join(others)}): they stay there")
        (source_ends,) = ends.read(source, list(committed), (ends.HIGH,), READ_TIMEOUT_S, retry=True)
        past = {k: (c.offset, source_ends[k]) for k, c in committed.items() if c.offset > source_ends[k]}
        if past:
            raise ConfigError(f"consumer group {group!r} on the DR cluster is past the source's end on "
                              + ", ".join(f"{t}[{p}] ({o} > {e})" for (t, p), (o, e) in sorted(past.items()))
                              + ": records written on the DR cluster only; it stays there")
        on_source = source_admin.live_members(group)
        if on_source:
            raise GroupActive(f"consumer group {group!r} has members on the source already ({', '.join(on_source)}); "
                              "stop them, then move it back again", group=group)
        source_admin.alter_group_offsets(group, committed)
    window_s = time.monotonic() - gone
    _check_written(source, group, committed, exact=True)
    manifest.replace(part, {**record, "state": moved.BACK, "back_at": timeline.iso(time.time()),
                            "offsets_back": [[t, p, c.offset, c.metadata] for (t, p), c in sorted(committed.items())]})
    say(f"consumer group {group!r}: {len(committed)} partitions' offsets written on the source as the DR cluster "
        f"has them ({window_s:.2f} s after its last member left): start it on the source")
    return {"group": group, "partitions": len(committed), "window_s": round(window_s, 3)}
