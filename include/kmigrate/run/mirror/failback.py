"""A failback (docs/DESIGN.md §12): the original cluster made primary again after a failover. The way
back is the way out reversed, on the same machinery: a mirror from the DR cluster to the original
(kafka_dr_mirror, its source the DR cluster: the original's topics hold a prefix of the DR
cluster's, and the mirror's copies resume from their ends with every resume check), then a planned
failover of that mirror (kafka_dr_failover), which stops the connectors on the DR cluster, copies and
verifies the rest, and moves the groups and connectors back.

What stock Kafka cannot do is truncate a log's end. Where the original holds offsets that the DR
cluster never got (an unplanned failover lost them: `promote.lost_records`), the two clusters hold
different records at the same offsets: the partition has diverged, and a copy refuses it. Before the
mirror back starts, `prepare_failback` proves that its two clusters are the failover's reversed (a
failback whose connections were not swapped would delete on the DR cluster), then names each
diverged partition of its own selection with its range; only when asked on that call (`rebuild`)
does it delete their topics on the original, recording first what is discarded, so that the mirror
creates them again like the DR cluster's and copies them whole. `plan_failback` shows the same,
read-only, before.

A failed-over mirror that renamed (a consolidation's: `orders` kept on the DR cluster as `a.orders`)
is failed back under the names reversed (`back_names`: each DR name to the original's, an explicit
map over what the failed-over run held): the failback's request takes them (`with_failback_names`),
its selection is read over the DR names and each selected topic named by its original name, which
is what is compared and deleted on the original, and the mirror back and its failover write the
original's names. A failback under other names is refused (`check_back_names`)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ClusterUnavailable, ConfigError
from kmigrate.kafka import ends as kafka_ends
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks import identity
from kmigrate.run.checks.selection import select
from kmigrate.run.connectors.migrate import stop_target_copies
from kmigrate.renames import PARAMS as RENAME_PARAMS, Renames
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.spec import mirror_renames, read_spec, shown
from kmigrate.run.mirror.promote import lost_records
from kmigrate.run.records import timeline
from kmigrate.run.records.snapshot import read_snapshot
from kmigrate.run.targets.prepare import created_topics

DISCARDED = "failback/discarded"


def back_names(failed_over: Manifest) -> Renames:
    """The names a failback of `failed_over` gives things on the original: its mirror's renames reversed,
    each DR name of a topic and a group the run held (its mirror's status, its snapshot, its promotion)
    to the original's, an explicit map; none when its mirror renamed nothing. A DR topic or group that
    is none of those (created on the DR cluster since) keeps its name."""
    rule = mirror_renames(failed_over)
    if not rule:
        return Renames()
    status = mirror_status.read(failed_over) or {}
    promoted = failed_over.read(Part.PROMOTED) or {}
    snapshot = read_snapshot(failed_over) if failed_over.read(Part.SNAPSHOT) is not None else {}
    topics = (mirror_status.mirrored_topics(status) | set(snapshot.get("topics", {}))
              | {r["topic"] for r in promoted.get("partitions", [])})
    groups = ({g["group"] for g in status.get("groups", []) + promoted.get("groups", []) if "group" in g}
              | set(snapshot.get("groups", {})))
    return Renames(topics={rule.topic(t): t for t in topics if rule.topic(t) != t},
                   groups={rule.group(g): g for g in groups if rule.group(g) != g}, connector_keys=rule.connector_keys)


def check_back_names(failed_over: Manifest, given: Renames) -> None:
    """ConfigError unless a failback's names (`given`: its request's, its mirror back's) are its
    failed-over run's reversed (`back_names`), before anything is read or changed: what it compares,
    deletes and rebuilds on the original is named by the original's names, which a mirror back under
    other names would not write."""
    wanted = back_names(failed_over)
    if dataclasses.replace(given, connector_keys={}) == dataclasses.replace(wanted, connector_keys={}):
        return  # (the connectors' keys that name topics rename nothing themselves)
    if given:
        raise ConfigError(f"a failback moves the topics and groups back to the original under the names they had there, "
                          f"so it takes no names of its own (it was given {shown(given)}); refused before anything "
                          "was read or changed. Trigger it again without topic_prefix, topic_renames, group_prefix "
                          "and group_renames (a failed-over mirror's renames are reversed by the failback itself)")
    raise ConfigError(f"the mirror of run {failed_over.run_id} renamed ({shown(mirror_renames(failed_over))}), so its "
                      f"failback's mirror back must write the original's names ({shown(wanted)}), and this one was "
                      "started without them; refused before anything was read or changed. Start the failback with "
                      "kafka_dr_mirror and failback_of, which reverses them")


def with_failback_names(run: RunRequest) -> RunRequest:
    """A failback's request (`failback_of`) under the names its mirror back gives things on the original
    (`back_names`; the request's `mirror_selection` names the failed-over run, so that its entries for
    what the failback does not select are left out, not refused); names of its own refused
    (`check_back_names`). Any other run as it is."""
    if not run.failback_of:
        return run
    failed_over = Manifest(run.state_location, run.failback_of)
    if run.renames:
        check_back_names(failed_over, run.renames)
    names = back_names(failed_over)
    if not names:
        return run
    back = run.with_params(**{param: names.as_params().get(param) for param in RENAME_PARAMS})
    return dataclasses.replace(back, mirror_selection=run.failback_of)


def diverged(failed_over: Manifest, original: ClusterConfig, topics: Collection[str] | None = None
             ) -> list[dict[str, Any]]:
    """The partitions of the failed-over run where the original holds offsets past what its unplanned
    failover promoted ([from, to), offsets), of `topics` only when given (a failback's selection);
    none after a planned failover, which lost nothing."""
    if failed_over.read(Part.PROMOTED) is None:
        return []
    return [r for r in lost_records(failed_over, original)
            if r["offsets"] > 0 and (topics is None or r["topic"] in topics)]


def selected(failed_over: Manifest, include: str, exclude: str | None = None) -> set[str]:
    """The topics of the failed-over run that a failback's selection (`include`, `exclude`, over the DR
    cluster's names: the mirror back's source) selects, by their names on the original."""
    promoted = failed_over.read(Part.PROMOTED) or {}
    on_dr = {r.get("dr_topic", r["topic"]): r["topic"] for r in promoted.get("partitions", [])}
    return {on_dr[t] for t in select(set(on_dr), include, exclude or None)}


def failed_over_connectors(failed_over: Manifest) -> list[str]:
    """The connectors the run's failover started on the DR Connect cluster (planned or unplanned)."""
    promoted = failed_over.read(Part.PROMOTED) or {}
    names = [s["name"] for s in (promoted.get("connectors") or {}).get("states", [])]
    return sorted(set(names) | set((failed_over.read(Part.CONNECTOR_STATES) or {}).get("states", {})))


def check_clusters(failed_over: Manifest, back: Manifest, dr: ClusterConfig, original: ClusterConfig,
                   original_connect: ConnectClient | None = None) -> dict[str, Any]:
    """The failback's clusters proven before anything is stopped or deleted (`identity.check_failback`):
    its source the DR cluster the failover promoted, its target the original, the Connect cluster it
    stops connectors on the original's; recorded as the failback's own (`back`). What was seen."""
    seen = identity.observe(dr, original, None, original_connect)
    identity.check_failback(failed_over, seen)
    identity.record(back, seen, what="failback")
    return seen


def plan_failback(failed_over: Manifest, seen: dict[str, Any], original: ClusterConfig, include: str,
                  exclude: str | None = None, renames: Renames = Renames()) -> dict[str, Any]:
    """A failback of `failed_over` between the clusters `seen` (`identity.observe`), read-only: its
    clusters proven to be the failover's reversed (`identity.check_failback`), and what it would delete
    on the original (the preflight shows it before anything is deleted): the diverged partitions of
    its own selection (`include`, `exclude`), and each of their topics with its partitions and the
    offsets discarded; the connectors it would stop there. A failback given `renames` other than the
    failed-over run's reversed is refused first."""
    check_back_names(failed_over, renames)
    identity.check_failback(failed_over, seen)
    topics = selected(failed_over, include, exclude)
    rows = diverged(failed_over, original, topics)
    deleting = sorted({r["topic"] for r in rows})
    counts = {}
    if deleting:
        with ClusterAdmin(original, timeout_s=10) as admin:
            counts = admin.partition_counts(deleting)
    return {"selected_topics": sorted(topics), "diverged": rows,
            "delete_topics": [{"topic": t, "partitions": counts.get(t), "discarded_offsets":
                               sum(r["offsets"] for r in rows if r["topic"] == t)} for t in deleting],
            "stop_connectors": failed_over_connectors(failed_over)}


def _refusal(failed_over: Manifest, rows: list[dict[str, Any]]) -> ConfigError:
    return ConfigError(
        f"the original cluster holds offsets the DR cluster never got (the unplanned failover of run "
        f"{failed_over.run_id} lost them): "
        + "; ".join(f"{r['topic']}[{r['partition']}] offsets {r['from']}-{r['to'] - 1} ({r['offsets']})" for r in rows)
        + ". Stock Kafka cannot truncate a log's end, so these partitions cannot be mirrored back; nothing was "
          "deleted. Set rebuild_diverged to delete their topics on the original and copy them again from the DR "
          "cluster (the offsets listed are discarded: save them first if they matter), or leave those topics out of "
          "the failback's selection (a new run_name: a mirror keeps its selection)")


def prepare_failback(failed_over: Manifest, back: Manifest, dr: ClusterConfig, original: ClusterConfig, *,
                     rebuild: bool, original_connect: ConnectClient | None = None,
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """Before the mirror `back` (from the DR cluster `dr` to `original`; its spec written) starts: its
    clusters proven to be the failover's reversed (`check_clusters`); the connectors the failover
    moved stopped on the original's Connect cluster (`original_connect`: a worker started again after
    an outage resumes its stale copies of them, which must neither write to the original's topics
    while the mirror does nor go on in their external systems); then the diverged partitions of its
    own selection named (with what those stale copies wrote), refused (ConfigError, with the way out)
    unless `rebuild`, asked on this call (an opt-in of an earlier call is not kept); with it, what
    will be discarded recorded in `back`'s part DISCARDED, then their topics deleted on the original.
    A retry deletes again only what the mirror has not created since, and only with `rebuild`. A
    mirror back whose names are not the failed-over run's reversed is refused first (`check_back_names`),
    before the clusters are read."""
    check_back_names(failed_over, read_spec(back).renames)
    check_clusters(failed_over, back, dr, original, original_connect)
    names = failed_over_connectors(failed_over)
    if names and original_connect is not None:
        stopped = stop_target_copies(original_connect, names)
        if stopped:
            say(f"stopped on the original's Connect cluster, where the DR cluster's run them: {', '.join(stopped)}")
    elif names:
        say(f"connectors {', '.join(names)} run on the DR Connect cluster: should the original's Connect cluster run "
            "them again, stop them there before the mirror back (give its connection)")
    spec = read_spec(back)
    topics = selected(failed_over, spec.topics_include, spec.topics_exclude)
    done = back.read(DISCARDED)
    if done is None:
        rows = diverged(failed_over, original, topics)
        if rows and not rebuild:
            raise _refusal(failed_over, rows)
        done = {"at": timeline.iso(time.time()), "failed_over": failed_over.run_id, "partitions": rows,
                "topics": sorted({r["topic"] for r in rows})}
        back.write_once(DISCARDED, done)  # what is discarded, recorded before anything is deleted
    gone = [t for t in done["topics"] if t in topics and t not in created_topics(back)]
    if gone and not rebuild:  # recorded by an earlier call that had the opt-in: this one has not
        raise _refusal(failed_over, [r for r in done["partitions"] if r["topic"] in gone])
    if gone:
        for (topic, partition), phrase in sorted(decided(original, gone).items()):
            say(f"{topic}[{partition}] on the original holds {phrase}; deleted with its topic")
        delete_topics(original, gone)
        say(f"deleted on the original cluster, to be copied again whole from the DR cluster: {', '.join(gone)} "
            f"(discarded: {sum(r['offsets'] for r in done['partitions'] if r['topic'] in gone)} offsets the DR "
            "cluster never got)")
    return done


def decided(cluster: ClusterConfig, topics: list[str], timeout_s: float = 180.0) -> dict[tuple[str, int], str]:
    """Wait until no transaction is open on `topics` on `cluster` but hanging ones, which are returned
    named. The original's producers' transactions cut off by the outage are aborted by its coordinator
    once their transaction.timeout.ms has passed; that abort writes its markers into whatever topic
    bears the name then, a rebuilt one too, where they would stand between the records the mirror
    copies. A hanging transaction (its coordinator has ended its producer's transactions: a broker
    killed while the markers of a commit were written can leave one) gets no marker ever, so it does
    not hold the deletion."""
    deadline = time.monotonic() + timeout_s
    with ClusterAdmin(cluster) as admin:
        keys = [(t, p) for t, n in admin.partition_counts(topics).items() for p in range(n)]
        while True:  # both ends in one reading, each within the admin client's timeout
            stable, high = kafka_ends.read(cluster, keys, (kafka_ends.STABLE, kafka_ends.HIGH), admin.timeout_s,
                                           retry=True)
            held = {k: stable[k] for k in keys if stable[k] < high[k]}
            hanging = txn_wire.hanging(cluster, held) if held else {}
            waiting = {k: offset for k, offset in held.items() if k not in hanging}
            if not waiting:
                return hanging
            if time.monotonic() > deadline:
                named = txn_wire.describe_all_open(cluster, waiting)
                raise ClusterUnavailable(
                    f"{cluster.name}: transactions are still open after {timeout_s:.0f} s on "
                    + "; ".join(f"{t}[{p}]: {named[(t, p)]}" for t, p in sorted(waiting))
                    + ". Their coordinator aborts them once their producers' transaction.timeout.ms has passed: "
                      "retry then (nothing was deleted). One its coordinator no longer knows hangs "
                      "(`kafka-transactions.sh find-hanging`): abort it by hand first")
            time.sleep(1.0)


def delete_topics(cluster: ClusterConfig, topics: list[str], timeout_s: float = 60.0) -> None:
    """`topics` deleted on `cluster` (those already gone are fine), waited for until the topic list no
    longer has them."""
    with ClusterAdmin(cluster) as admin:
        present = [t for t in topics if t in set(admin.list_topics())]
        if present:
            for topic, future in admin.client.delete_topics(present, operation_timeout=timeout_s).items():
                try:
                    future.result(timeout=timeout_s)
                except Exception as exc:  # noqa: BLE001 - deleted meanwhile is fine; anything else is named below
                    if "UNKNOWN_TOPIC" not in str(exc):
                        raise ClusterUnavailable(f"{cluster.name}: deleting topic {topic} failed ({exc}); check "
                                                 "that the failback's principal may delete it, then retry") from exc
        deadline = time.monotonic() + timeout_s
        while set(topics) & set(admin.list_topics()):
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"{cluster.name}: topics {sorted(set(topics) & set(admin.list_topics()))} "
                                         f"are still listed {timeout_s:.0f} s after their deletion; retry")
            time.sleep(0.2)
