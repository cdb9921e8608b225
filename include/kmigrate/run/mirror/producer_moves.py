"""An application's producers moved onto the DR cluster while the mirror runs (docs/DESIGN.md §12, moving applications one at a time):
its topics are promoted there, the mirror copies them no more, and the producers go on writing on
the DR cluster at the next offset of each partition; the rest of the workload keeps running on the
source. Consumers of those topics moved already read the new records there, at the offsets they
were at.

A promotion of topics (`promote_topics`), each step safe to run again:
1. each topic recorded as promoting in the mirror's run manifest (`kmigrate.run.records.moves`);
   the mirror goes on copying it;
2. its writers stopped on the source: every partition's end stands still for `quiet_s`, and every
   transaction on it is decided (a producer left with one open is named, once the wait is over);
3. the DR cluster holds every record up to those ends (the mirror drained them);
4. verified record by record, only past what the mirror had verified (`verify_partition`, as the
   cutover window does): the DR cluster's log start and end equal the source's;
5. recorded as promoted with those ends: the mirror's driver ends its term at its next status, and
   its next term copies them no more (so does a restarted mirror); the move waits for that term;
6. nothing written on the source since (else the topics go back to the mirror, their state promoting
   again, and the move is refused naming what was written: their producers still write there);
7. the settings the copy set on the DR topics put back to the source's (`restore_target_topics`);
   recorded as ended: the owner starts the producers on the DR cluster.
A record written on the source to a promoted topic afterwards is split brain: the mirror's status
names it, and copies it never. Nothing is written on the source. Under the mirror's renames each
step reads and writes the DR topics by their names there; the records keep the source's."""
from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError, ProducersActive, TransactionOpen
from kmigrate.kafka import ends, txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.manifest import Manifest
from kmigrate.model import WorkUnit
from kmigrate.run.checks import identity
from kmigrate.run.checks.request import MOVE_QUIET_S, MOVE_WAIT_S
from kmigrate.run.copying.precopy import compacted_topics
from kmigrate.run.mirror import connector_moves
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import VERIFIED
from kmigrate.run.mirror.moves import READ_TIMEOUT_S, on_dr, wait_for, wait_held
from kmigrate.run.mirror.spec import mirror_renames
from kmigrate.run.records import timeline
from kmigrate.run.records.moves import IS_PROMOTED, PROMOTING, topic_part
from kmigrate.run.targets.prepare import restore_target_topics
from kmigrate.run.verify.partition import verify_partition

log = logging.getLogger(__name__)

Key = tuple[str, int]
VERIFY_AT_ONCE = 8  # partitions verified at once


class VerificationFailed(KmigrateError):
    """The DR cluster's records of a topic to promote differ from the source's."""


def promote_topics(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, topics: Sequence[str], *,
                   quiet_s: float = MOVE_QUIET_S, wait_s: float = MOVE_WAIT_S, poll_s: float = 0.05,
                   connectors: Sequence[str] = (), connect: tuple[ConnectClient | None, ConnectClient | None] = (None, None),
                   overrides: Mapping[str, Mapping[str, Any]] | None = None,
                   say: Callable[[str], None] = log.info) -> dict[str, Any]:
    """Promote `topics` of the mirror run `manifest` on the DR cluster `target` (the steps above); a
    row: the topics, their partitions, how long the move waited for the writers to stop
    (`waited_s`), how long from the writers stopped to the producers free to start on the DR
    cluster (`window_s`), and when each step of that ended (`steps_s`, seconds from the writers' stop: where
    the window goes). Each wait gives up after `wait_s`, naming what it waited for and the way
    out; a move given up is tried again as it is. `connectors`: the application's source connectors,
    stopped on the source Connect cluster (`connect`: the source's, the DR cluster's) before the
    writers are waited for, placed on the DR Connect cluster with their offsets once the topics are
    promoted (`connector_moves`), before the promotion is recorded as ended."""
    topics = sorted(set(topics))
    renames = mirror_renames(manifest)
    names = renames.topic_names(topics)  # each topic's name on the DR cluster
    source_connect, dr_connect = connect
    if connectors and (source_connect is None or dr_connect is None):
        raise ConfigError(f"moving connectors {', '.join(connectors)} needs both Connect clusters; name the source's "
                          "and the DR cluster's Connect connections")
    status = mirror_status.read(manifest)
    if status is None:
        raise ConfigError(f"run {manifest.run_id!r} has no mirror status: promoting {', '.join(topics)} needs a "
                          "running mirror of them (kafka_dr_mirror); start it, or name its run")
    identity.record(manifest, identity.observe(source, target), what=f"promotion of {', '.join(topics)}")
    records = {t: manifest.read(topic_part(t)) or {} for t in topics}
    if all(r.get("ended") for r in records.values()):
        say(f"{', '.join(topics)} promoted already: their producers write on the DR cluster")
        return {"topics": topics, "partitions": sum(len(r["ends"]) for r in records.values()), "promoted_before": True}
    held = mirror_status.mirrored_topics(status)
    outside = [t for t in topics if t not in held]
    if outside:
        raise ConfigError(f"the mirror of run {manifest.run_id!r} does not hold {', '.join(outside)}: a topic is "
                          "promoted where the mirror keeps it; check the names, or add them to the mirror's selection")
    began = time.monotonic()
    pending = [t for t in topics if records[t].get("state") != IS_PROMOTED]
    for topic in pending:
        if not records[topic]:
            records[topic] = {"topic": topic, "state": PROMOTING, "began": timeline.iso(time.time())}
            manifest.replace(topic_part(topic), records[topic])
    entries = connector_moves.stop_on_source(manifest, source_connect, connectors, "source") if connectors else {}
    stopped = time.monotonic()
    verified, steps = 0, {}
    if pending:
        with ClusterAdmin(source, READ_TIMEOUT_S) as admin:
            counts = admin.partition_counts(pending)
        keys = [(t, p) for t in pending for p in range(counts[t])]
        last, stopped = _wait_stopped(source, keys, quiet_s, wait_s, poll_s)
        steps["still"] = time.monotonic()
        wait_held(target, on_dr(last, renames), wait_s, poll_s,
                  "the mirror to copy the topics to promote up to the source's ends", "move again")
        steps["drained"] = time.monotonic()
        verified = _verify(manifest, source, target, last, names)
        steps["verified"] = time.monotonic()
        for topic in pending:
            records[topic] = {**records[topic], "state": IS_PROMOTED, "promoted_at": timeline.iso(time.time()),
                              "ends": {str(p): e for (t, p), e in sorted(last.items()) if t == topic}}
            manifest.replace(topic_part(topic), records[topic])
    _wait_copied_no_more(manifest, topics, wait_s, poll_s)
    steps["copied_no_more"] = time.monotonic()
    _check_unwritten(manifest, source, target, records, names)
    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        configs = restore_target_topics(source_admin, target_admin, {t: names[t] for t in topics})
    steps["restored"] = time.monotonic()
    placed = connector_moves.place_on_dr(manifest, source_connect, dr_connect, entries,
                                         target_bootstrap=target.bootstrap_servers, overrides=overrides,
                                         names=renames.topic_names(mirror_status.mirrored_topics(status))
                                         ) if entries else []
    if placed:
        steps["connectors"] = time.monotonic()
    window_s = time.monotonic() - stopped
    steps_s = {step: round(at - stopped, 3) for step, at in steps.items()}  # when each step ended
    for topic in topics:
        manifest.replace(topic_part(topic), {**records[topic], "ended": timeline.iso(time.time()),
                                             "window_s": round(window_s, 3), "configs": configs[topic],
                                             "steps_s": steps_s})
    partitions = sum(len(records[t]["ends"]) for t in topics)
    say(f"{', '.join(topics)} promoted on the DR cluster: {partitions} partitions at the source's ends, verified "
        f"record by record ({verified} records past what the mirror had verified), copied no more "
        + (f"source connectors {', '.join(connectors)} placed there in their state, " if placed else "")
        + f"({window_s:.2f} s after their writers stopped): start their producers on the DR cluster")
    return {"topics": topics, "partitions": partitions, "verified_records": verified,
            "waited_s": round(stopped - began, 3), "window_s": round(window_s, 3), "promoted_before": False,
            "connectors": placed,
            "steps_s": steps_s}


def _wait_stopped(source: ClusterConfig, keys: Sequence[Key], quiet_s: float, wait_s: float,
                  poll_s: float) -> tuple[dict[Key, int], float]:
    """(each partition's end on the source, when they last moved, in monotonic time; the first
    reading's time when they never did) once they stood still for `quiet_s` with every transaction
    on them decided. ProducersActive naming the partitions still written after `wait_s`;
    TransactionOpen naming the open transactions when the ends stood still but one stayed open."""
    deadline = time.monotonic() + wait_s
    last: dict[Key, int] = {}
    since = time.monotonic()
    moving: list[Key] = []
    while True:
        now = time.monotonic()
        high, stable = ends.read(source, keys, (ends.HIGH, ends.STABLE), READ_TIMEOUT_S, retry=True)
        moving = [k for k in keys if last and high[k] != last[k]]
        if not last or moving:
            last, since = dict(high), now
        open_ = {k: stable[k] for k in keys if stable[k] < high[k]}
        if now - since >= quiet_s and not open_:
            return last, since
        if time.monotonic() > deadline:
            if now - since >= quiet_s:
                named = "; ".join(f"{t}[{p}]: {text}" for (t, p), text in sorted(txn_wire.describe_all_open(source, open_).items()))
                raise TransactionOpen(f"the writers of the topics to promote stopped, but {len(open_)} partitions hold "
                                      f"a transaction still open after {wait_s:.0f} s: {named}. Let its producer commit "
                                      "or abort it (the broker aborts a killed producer's after its "
                                      "transaction.timeout.ms), then move again; the mirror goes on meanwhile")
            raise ProducersActive(f"waited {wait_s:.0f} s for the topics' writers to stop on the source; still written: "
                                  + ", ".join(f"{t}[{p}]" for t, p in sorted(moving)[:10])
                                  + ". Stop their producers (and source connectors) on the source, then move again; "
                                  "the mirror goes on meanwhile")
        time.sleep(poll_s)


def _verify(manifest: Manifest, source: ClusterConfig, target: ClusterConfig, last: Mapping[Key, int],
            names: Mapping[str, str]) -> int:
    """Each partition verified up to its end in `last` (on the DR cluster under its topic's name in
    `names`), past what the mirror verified while live (its last equal row); the records read.
    VerificationFailed naming every difference."""
    rows = {(r["topic"], r["partition"]): r for r in (manifest.read(VERIFIED) or {}).get("rows", []) if r.get("equal")}
    compacted = compacted_topics(source, {t for t, _ in last})
    with concurrent.futures.ThreadPoolExecutor(VERIFY_AT_ONCE, thread_name_prefix="promote-verify") as pool:
        found = list(pool.map(lambda k: verify_partition(source, target, WorkUnit(k[0], k[1], last[k],
                                                                                  target_topic=names[k[0]]),
                                                         live=rows.get(k), compacted=k[0] in compacted), sorted(last)))
    unequal = [r for r in found if not r["equal"]]
    if unequal:
        raise VerificationFailed(
            f"{len(unequal)} partitions differ on the DR cluster, so nothing was promoted (the mirror goes on): "
            + "; ".join(f"{r['topic']}[{r['partition']}]: {'; '.join(r['problems'])}" for r in unequal[:10]))
    return sum(r["verified_in_window"][1] - r["verified_in_window"][0] for r in found)


def _wait_copied_no_more(manifest: Manifest, topics: Sequence[str], wait_s: float, poll_s: float) -> None:
    """Until a status of a term that copies none of `topics` (the driver began it after it found them
    promoted, and the term before it had ended: its tasks and their leases are gone)."""
    def copied_no_more() -> bool:
        status = mirror_status.read(manifest) or {}
        rows = {r["topic"]: r for r in status.get("promoted", [])}
        term = status.get("term")
        return term is not None and all(t in rows and rows[t]["from_term"] is not None and term >= rows[t]["from_term"]
                                        for t in topics)

    wait_for(copied_no_more, wait_s, poll_s, f"the mirror of run {manifest.run_id!r} to copy "
             f"{', '.join(topics)} no more", lambda: "is the mirror running? Its status names its last round; move "
             "again once it runs", ConfigError)


def _check_unwritten(manifest: Manifest, source: ClusterConfig, target: ClusterConfig,
                     records: Mapping[str, Mapping[str, Any]], names: Mapping[str, str]) -> None:
    """Both clusters' ends still those promoted (the DR topics read under their names in `names`).
    Else the topics go back to the mirror (promoting again: it copies what was written) and
    ProducersActive names what was written."""
    promoted = {(t, int(p)): e for t, r in records.items() for p, e in r["ends"].items()}
    (source_high,) = ends.read(source, list(promoted), (ends.HIGH,), READ_TIMEOUT_S, retry=True)
    (dr_high,) = ends.read(target, list(promoted), (ends.HIGH,), READ_TIMEOUT_S, retry=True, names=names)
    written = {k: (source_high[k], dr_high[k]) for k, e in promoted.items() if source_high[k] != e or dr_high[k] != e}
    if not written:
        return
    for topic, record in records.items():
        manifest.replace(topic_part(topic), {k: v for k, v in record.items() if k not in ("ends", "promoted_at")}
                         | {"state": PROMOTING})
    raise ProducersActive(
        "records were written on the source while the topics were promoted, so they are mirrored again: "
        + "; ".join(f"{t}[{p}]: promoted at {promoted[(t, p)]}, the source ends at {s}, the DR cluster at {d}"
                    for (t, p), (s, d) in sorted(written.items())[:10])
        + ". Stop their producers on the source, then move again")
