"""An unplanned failover (docs/DESIGN.md §12): the source cannot be read, and the DR cluster is
promoted with what it holds. Nothing is read from the source and nothing is written to it.

The course, each step idempotent (a retry does it again, to the same end):
1. the source must not answer (a source that answers takes the planned failover, which loses
   nothing); the mirror is asked to stop and waited for (it cannot copy without the source);
2. every mirrored partition's transaction the mirror left open on the DR cluster (a task killed
   between its writes and its commit) is aborted by fencing the copier's transactional id of that
   partition, and the DR cluster's ends are read: what the applications will find;
3. each selected group's offsets on the DR cluster (the mirror copied them, never past the DR end of
   their partition) are read and checked to lie within the DR cluster's ends;
4. the connectors the mirror kept (`connectors.promote_connectors`: its last safe reading of the
   source's) are created on the DR Connect cluster with their offsets, in the state they had;
5. the part `failover/promoted` records the DR ends, the groups, and the RPO: for each partition,
   the records the source had decided that the DR cluster lacks as of the mirror's last status (a
   lower bound: the source may have written more since), and how long the oldest had waited.

Once the source can be read again, `lost_records` gives, for each partition, the records it holds
past the DR end the failover promoted: what the failover lost, which a failback must not mirror
back over what the DR cluster wrote since (those partitions have diverged).

A mirror that renames kept each topic and group under its name on the DR cluster (its status names
both): each step reads and writes those there, and the part names both (`dr_topic`, `dr_group`)."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from kmigrate import client_settings
from kmigrate.config import ClusterConfig
from kmigrate.copy.writer import transactional_id
from kmigrate.errors import ConfigError, KmigrateError
from kmigrate.kafka import ends as kafka_ends
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.kafka.pool import shared_admin
from kmigrate.manifest import Manifest, Part
from kmigrate.renames import partitions_there
from kmigrate.run.checks import identity
from kmigrate.run.checks.request import STALE_AFTER_S
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import promote_connectors
from kmigrate.run.mirror.failover import stop_mirror
from kmigrate.run.mirror.spec import read_spec
from kmigrate.run.mirror.term import STOP
from kmigrate.run.records import timeline

PROMOTED = Part.PROMOTED
UNPLANNED = "unplanned failover"  # why the mirror is asked to stop (its STOP part)
Key = tuple[str, int]
READ_TIMEOUT_S = 30.0  # a reading of the DR cluster's ends, its retries included


def source_answers(source: ClusterConfig, timeout_s: float = 3.0) -> bool:
    """Whether the source answers a metadata request within `timeout_s` (no at once when every
    bootstrap server refuses the connection)."""
    if client_settings.listening(source.name, source.bootstrap_servers, timeout_s) is False:
        return False
    try:
        with ClusterAdmin(source, timeout_s=timeout_s) as admin:
            admin.check_reachable(timeout_s=timeout_s)
    except KmigrateError:
        return False
    return True


def check_unplanned(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, *,
                    stale_after_s: float = STALE_AFTER_S, wait_s: float | None = None) -> None:
    """What an unplanned failover needs, read-only: the run's mirror; a DR cluster that answers and is
    the one the mirror writes (its id as recorded when the mirror began); a source connection that is
    the one the mirror reads (its addresses as recorded: a silent cluster cannot be asked its id, and a
    mistyped address is silent too) and does not answer; and the mirror's own status showing that
    source unreachable (`mirror_sees_source_gone`). ConfigError (WrongCluster for another cluster)
    naming what is wrong and the way out."""
    read_spec(manifest)  # a run with no mirror is named, not promoted
    identity.check_same_source(manifest, source)
    identity.check_recorded(manifest.run_id, manifest.read(identity.IDENTITY) or {},
                            {"target": identity.kafka_side(target)}, what="mirror")
    if source_answers(source):
        raise ConfigError(f"the source cluster ({source.name}) answers: an unplanned failover promotes the DR "
                          "cluster with what it holds and loses what the mirror had not copied. Run the planned "
                          "failover instead (unplanned false: nothing lost), or stop the source first")
    mirror_sees_source_gone(manifest, stale_after_s=stale_after_s, wait_s=wait_s)


def mirror_sees_source_gone(manifest: Manifest, *, stale_after_s: float = STALE_AFTER_S,
                            wait_s: float | None = None) -> None:
    """The mirror's status must say that it cannot read the source either: its last reading failed
    (the status's error), it beats no more (its heartbeat older than `stale_after_s`: gone with the
    source's region, maybe), or an unplanned failover asked it to stop already (a retry). A mirror
    still reading its source while this host cannot is a sign that the connection here is not the
    source's (a network of this host's own): refused after `wait_s` (default: what the mirror needs
    to notice, a reading's timeout and two intervals)."""
    spec = read_spec(manifest)
    wait_s = mirror_status.STATUS_TIMEOUT_S + 2 * spec.interval_s + 2.0 if wait_s is None else wait_s
    deadline = time.monotonic() + wait_s
    while True:
        status = mirror_status.read(manifest)
        stop = manifest.read(STOP) or {}
        if (status is None or status.get("error") or stop.get("why") == UNPLANNED
                or (mirror_status.heartbeat_age(status) or 0.0) > stale_after_s):
            return
        if time.monotonic() > deadline:
            raise ConfigError(
                f"the mirror of run {manifest.run_id} still reads the source (its status at {status['heartbeat']} "
                f"shows no error, process {status['pid']} on {status['host']}) though the source connection here does "
                "not answer: the source is not gone, or this host's connection is not the mirror's. Run the planned "
                "failover (unplanned false), or retry once the mirror's status shows the source unreachable")
        time.sleep(0.2)


def unplanned_failover(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, *,
                       stale_after_s: float = STALE_AFTER_S, dr_connect: ConnectClient | None = None,
                       overrides: Mapping[str, Mapping[str, Any]] | None = None,
                       say: Callable[[str], None] = print) -> dict[str, Any]:
    """Promote the DR cluster of the run's mirror with what it holds, and the connectors it kept on
    `dr_connect` (`overrides`: their config overrides, and the secrets the mirror did not keep); the
    part PROMOTED (its content again, for a retry after it was written)."""
    done = manifest.read(PROMOTED)
    if done is not None:
        say(f"run {manifest.run_id} was promoted at {done['at']} already")
        return done
    check_unplanned(manifest, source, target, stale_after_s=stale_after_s)
    began = time.time()
    last = stop_mirror(manifest, UNPLANNED, stale_after_s=stale_after_s, say=say)
    if not last or not last.get("partitions"):
        raise ConfigError(f"the mirror of run {manifest.run_id} never reported a partition: there is nothing on the "
                          "DR cluster to promote")
    names = {p["topic"]: p.get("dr_topic", p["topic"]) for p in last["partitions"]}  # each topic's on the DR cluster
    keys = [(p["topic"], p["partition"]) for p in last["partitions"]]
    aborted = abort_open(manifest.run_id, target, list(partitions_there(keys, names)))
    # keyed by the source's names, as the status
    (dr_ends,) = kafka_ends.read(target, keys, (kafka_ends.HIGH,), READ_TIMEOUT_S, retry=True, names=names)
    rpo = [{"topic": p["topic"], "partition": p["partition"], "dr_end": dr_ends[(p["topic"], p["partition"])],
            "source_end_last_seen": p["source_end"],
            "behind_records": max(0, p["source_end"] - dr_ends[(p["topic"], p["partition"])]),
            "behind_s": p["behind_s"], **({"dr_topic": p["dr_topic"]} if "dr_topic" in p else {})}
           for p in last["partitions"]]
    group_ids = {g["group"]: g.get("dr_group", g["group"]) for g in last.get("groups", []) if "group" in g}
    groups = check_groups(target, group_ids, dr_ends, names)
    connectors = promote_connectors(manifest, dr_connect, dr_ends, dr_bootstrap=target.bootstrap_servers,
                                    overrides=overrides, names=names)
    promoted = {"at": timeline.iso(time.time()), "began": timeline.iso(began), "seconds": round(time.time() - began, 3),
                "mirror_last_status": last["heartbeat"], "aborted": aborted, "partitions": rpo, "groups": groups,
                "connectors": connectors}
    promoted["behind_records"], promoted["behind_s_max"] = mirror_status.lag(rpo)
    manifest.write_once(PROMOTED, promoted)
    say(f"promoted the DR cluster: {len(rpo)} partitions, {promoted['behind_records']} records behind the source as "
        f"of the mirror's last status ({last['heartbeat']}), {len(aborted)} open transactions aborted")
    return promoted


def abort_open(run_id: str, target: ClusterConfig, keys: list[Key]) -> list[dict[str, Any]]:
    """The transactions the run's mirror left open on `keys` (the DR partitions, under their names
    there) aborted (fenced by its copier's transactional id of each partition, which names the DR
    topic); a transaction still open after that is someone else's, named (the DR topics are the
    mirror's: nothing else should write them)."""
    stable, ends = kafka_ends.read(target, keys, (kafka_ends.STABLE, kafka_ends.HIGH), READ_TIMEOUT_S, retry=True)
    open_ = [k for k in keys if stable[k] < ends[k]]
    for topic, partition in open_:
        txn_wire.fence(target, topic, partition, transactional_id(run_id, topic, partition))
    if not open_:
        return []
    (after,) = kafka_ends.read(target, open_, (kafka_ends.STABLE,), READ_TIMEOUT_S, retry=True)
    still = [k for k in open_ if after[k] < ends[k]]
    if still:
        raise ConfigError("transactions of another producer are open on the DR cluster: "
                          + ", ".join(f"{t}[{p}] from offset {after[(t, p)]}" for t, p in still)
                          + "; the mirrored topics must be written by the mirror alone. Let that producer end them "
                            "(or wait for its transaction.timeout.ms), then retry")
    return [{"topic": t, "partition": p, "from": stable[(t, p)], "to": ends[(t, p)]} for t, p in open_]


def check_groups(target: ClusterConfig, groups: Mapping[str, str], dr_ends: Mapping[Key, int],
                 names: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Each group's committed offsets on the DR cluster's mirrored partitions, checked to lie within
    the DR ends (the mirror capped them there; DR ends do not move back). `groups`: each group to
    its id on the DR cluster; `names`: each topic to its name there (`dr_ends` keyed by the source's)."""
    there = partitions_there(dr_ends, names or {})
    rows = []
    with shared_admin(target) as admin:
        for group, on_dr in sorted(groups.items()):
            committed = {k: c.offset for k, c in admin.committed(on_dr).items() if k in there}
            past = {k: o for k, o in committed.items() if o > dr_ends[there[k]]}
            rows.append({"group": group, **({"dr_group": on_dr} if on_dr != group else {}),
                         "partitions": len(committed), "past_dr_end": len(past),
                         "offsets": {f"{t}[{p}]": o for (t, p), o in sorted(committed.items())}})
    return rows


def lost_records(manifest: Manifest, source: ClusterConfig) -> list[dict[str, Any]]:
    """Once the source can be read again after an unplanned failover: each promoted partition's offsets
    on the source past the DR end the failover promoted ([from, to), and how many: records, and the
    markers of transactions among them): what the failover lost.
    ClusterUnavailable while the source cannot be read."""
    promoted = manifest.read(PROMOTED)
    if promoted is None:
        raise ConfigError(f"run {manifest.run_id} had no unplanned failover (no part {PROMOTED})")
    keys = [(r["topic"], r["partition"]) for r in promoted["partitions"]]
    with ClusterAdmin(source, timeout_s=10) as admin:
        admin.check_reachable()
        ends = admin.stable_ends(keys, retry=True)
    rows = []
    for r in promoted["partitions"]:
        key = (r["topic"], r["partition"])
        rows.append({"topic": key[0], "partition": key[1], "from": r["dr_end"], "to": ends[key],
                     "offsets": max(0, ends[key] - r["dr_end"])})
    return rows

