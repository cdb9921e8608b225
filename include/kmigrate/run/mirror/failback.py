"""A failback (docs/DESIGN.md §12): the original cluster made primary again after a failover. The way
back is the way out reversed, on the same machinery: a mirror from the DR cluster to the original
(kafka_dr_mirror, its source the DR cluster: the original's topics hold a prefix of the DR
cluster's, and the mirror's copies resume from their ends with every resume check), then a planned
failover of that mirror (kafka_dr_failover), which stops the connectors on the DR cluster, copies and
verifies the rest, and moves the groups and connectors back.

What stock Kafka cannot do is truncate a log's end. Where the original holds offsets that the DR
cluster never got (an unplanned failover lost them: `promote.lost_records`), the two clusters hold
different records at the same offsets: the partition has diverged, and a copy refuses it. Before the
mirror back starts, `prepare_failback` names each diverged partition with its range; only when asked
(`rebuild`) does it delete their topics on the original, recording first what is discarded, so that
the mirror creates them again like the DR cluster's and copies them whole."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ClusterUnavailable, ConfigError
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest, Part
from kmigrate.run.connectors.migrate import stop_target_copies
from kmigrate.run.mirror.promote import lost_records
from kmigrate.run.report import timeline
from kmigrate.run.targets.prepare import created_topics

DISCARDED = "failback/discarded"


def diverged(failed_over: Manifest, original: ClusterConfig) -> list[dict[str, Any]]:
    """The partitions of the failed-over run where the original holds offsets past what its unplanned
    failover promoted ([from, to), offsets); none after a planned failover, which lost nothing."""
    if failed_over.read(Part.PROMOTED) is None:
        return []
    return [r for r in lost_records(failed_over, original) if r["offsets"] > 0]


def failed_over_connectors(failed_over: Manifest) -> list[str]:
    """The connectors the run's failover started on the DR Connect cluster (planned or unplanned)."""
    promoted = failed_over.read(Part.PROMOTED) or {}
    names = [s["name"] for s in (promoted.get("connectors") or {}).get("states", [])]
    return sorted(set(names) | set((failed_over.read(Part.CONNECTOR_STATES) or {}).get("states", {})))


def prepare_failback(failed_over: Manifest, back: Manifest, original: ClusterConfig, *, rebuild: bool,
                     original_connect: ConnectClient | None = None,
                     say: Callable[[str], None] = print) -> dict[str, Any]:
    """Before the mirror `back` (from the DR cluster to `original`) starts: the connectors the failover
    moved stopped on the original's Connect cluster (`original_connect`: a worker started again after
    an outage resumes its stale copies of them, which must neither write to the original's topics
    while the mirror does nor go on in their external systems); then the diverged partitions of the
    run `failed_over` named (with what those stale copies wrote), refused (ConfigError, with the way
    out) unless `rebuild`; with it, what will be discarded recorded in `back`'s part DISCARDED, then
    their topics deleted on the original. A retry deletes again only what the mirror has not created
    since."""
    names = failed_over_connectors(failed_over)
    if names and original_connect is not None:
        stopped = stop_target_copies(original_connect, names)
        if stopped:
            say(f"stopped on the original's Connect cluster, where the DR cluster's run them: {', '.join(stopped)}")
    elif names:
        say(f"connectors {', '.join(names)} run on the DR Connect cluster: should the original's Connect cluster run "
            "them again, stop them there before the mirror back (give its connection)")
    done = back.read(DISCARDED)
    if done is None:
        rows = diverged(failed_over, original)
        if rows and not rebuild:
            raise ConfigError(
                f"the original cluster holds offsets the DR cluster never got (the unplanned failover of run "
                f"{failed_over.run_id} lost them): "
                + "; ".join(f"{r['topic']}[{r['partition']}] offsets {r['from']}-{r['to'] - 1} ({r['offsets']})"
                            for r in rows)
                + ". Stock Kafka cannot truncate a log's end, so these partitions cannot be mirrored back. Set "
                  "rebuild_diverged to delete their topics on the original and copy them again from the DR cluster "
                  "(the offsets listed are discarded: save them first if they matter), or leave those topics out")
        done = {"at": timeline.iso(time.time()), "failed_over": failed_over.run_id, "partitions": rows,
                "topics": sorted({r["topic"] for r in rows})}
        back.write_once(DISCARDED, done)  # what is discarded, recorded before anything is deleted
    gone = [t for t in done["topics"] if t not in created_topics(back)]
    if gone:
        for (topic, partition), phrase in sorted(decided(original, gone).items()):
            say(f"{topic}[{partition}] on the original holds {phrase}; deleted with its topic")
        delete_topics(original, gone)
        say(f"deleted on the original cluster, to be copied again whole from the DR cluster: {', '.join(gone)} "
            f"(discarded: {sum(r['offsets'] for r in done['partitions'])} offsets the DR cluster never got)")
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
        while True:
            stable, ends = admin.stable_ends(keys, retry=True), admin.end_offsets(keys, retry=True)
            held = {k: stable[k] for k in keys if stable[k] < ends[k]}
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
