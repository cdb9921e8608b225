"""Copy one partition from the source cluster to the target: the checks every copy makes first, then
preserve or translate mode."""
from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence

from confluent_kafka import KafkaException

from kmigrate.claims.leases import PartitionLease
from kmigrate.config import ClusterConfig
from kmigrate.copy import repeats
from kmigrate.copy.preserve import copy_preserve
from kmigrate.copy.translate import copy_translate
from kmigrate.copy.writer import CopyOptions, Writer, transient
from kmigrate.errors import ClusterUnavailable, CopyError, CopyInterrupted, KmigrateError, SourceNotReady
from kmigrate.kafka import ends, leaders, txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.pool import shared_admin
from kmigrate.model import TRANSLATE, OffsetRun, PartitionResult, WorkUnit

log = logging.getLogger(__name__)


def copy_partition(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                   options: CopyOptions = CopyOptions(), resume_map: Sequence[OffsetRun] = (),
                   own_end: int | None = None, lease: PartitionLease | None = None) -> PartitionResult:
    """Copy `unit` and return its result. Safe to re-run: preserve mode resumes from the target's
    end. Translate mode resumes from `resume_map`, the offset map of the earlier runs of this
    partition (from the run manifest); without it the target's data counts as an unrelated prefix.
    `own_end`: where this run's earlier copy of the partition left the target's end (from the run
    manifest): a target ending there is this run's copy even when the source has since dropped
    all of it (retention moved the log start past it).

    A preserve-mode copy cut off by something that passes (a leader moving, a broker going away,
    too few in-sync replicas for a while; `CopyInterrupted`, a broken connection, a cluster not
    answering) resumes from the target's end, with new connections to the leaders of then, for up
    to `options.retry_for_s`; the resume checks of every attempt apply (docs/DESIGN.md §4.3).
    `lease`: the partition's lease, taken with those of the other partitions of a task (whose end
    releases it); without it the copy takes its own and releases it."""
    own_lease = lease is None
    if lease is None:
        lease = PartitionLease(target, options.run_id, unit.target_topic, unit.partition, options.lease_s)
    lease.acquire()  # one copier per target partition, whatever its path (docs/DESIGN.md §4.7)
    given = options.guard  # the caller's own check (a mirror's term ended), before the lease's

    def guard() -> None:
        if given is not None:
            given()
        lease.check()

    options = dataclasses.replace(options, guard=guard)
    try:
        if unit.mode == TRANSLATE:
            return _copy_once(source, target, unit, options, resume_map, own_end)
        return _copy_resuming(source, target, unit, options, resume_map, lease, own_end)
    finally:
        if own_lease:
            lease.release()


def _copy_resuming(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, options: CopyOptions,
                   resume_map: Sequence[OffsetRun], lease: PartitionLease, own_end: int | None) -> PartitionResult:
    began = time.monotonic()
    deadline = began + options.retry_for_s
    attempt = 1
    attempted = [-1]  # the highest target offset an attempt of this copy meant to write up to
    first: BaseException | None = None  # what interrupted the first attempt (a full disk, say), named at the end
    while True:
        try:
            if attempt > 1:
                options.may_write()  # the caller may have ended the copy meanwhile (its guard raises)
                for cluster in (source, target):  # one gone is known at once, not after a reading's timeout
                    ends.check_listening(cluster)
            lease.acquire()  # again, if it lapsed while the clusters misbehaved
            return _copy_once(source, target, unit, options, resume_map, own_end, attempted)
        except (CopyInterrupted, ClusterUnavailable, OSError, KafkaException) as exc:
            if isinstance(exc, KafkaException) and not transient(exc.args[0]):
                raise
            first = first or exc
            if time.monotonic() > deadline:
                earlier = f"; the first time: {first}" if str(first) != str(exc) else ""
                exc_text = str(exc) or type(exc).__name__  # a broken connection may say nothing
                raise CopyError(f"{unit.topic}[{unit.partition}]: the copy was interrupted {attempt} times in "
                                f"{time.monotonic() - began:.0f} s (retry_for_s {options.retry_for_s:.0f}) and gave "
                                f"up; the last time: {exc_text}{earlier}. Nothing was written "
                                "at a wrong offset; re-run the copy once the clusters are healthy (it resumes from "
                                "the target's end)", topic=unit.topic, partition=unit.partition) from exc
            leaders.forget(source, [(unit.topic, unit.partition)])  # the next attempt looks the leaders up again
            leaders.forget(target, [(unit.target_topic, unit.partition)])
            own_end = _own_end_after(target, unit, own_end, attempted[0])
            options = dataclasses.replace(options, continues_at=None, ends_read=None)  # what it left is checked again
            pause = min(0.2 * 2 ** (attempt - 1), 5.0)
            log.warning("%s[%d]: copy attempt %d interrupted (%s); resuming from the target's end in %.1f s",
                        unit.topic, unit.partition, attempt, exc, pause)
            attempt += 1
            time.sleep(pause)


def _own_end_after(target: ClusterConfig, unit: WorkUnit, own_end: int | None, attempted: int) -> int | None:
    """Where this run's copy left the target's end after an interrupted attempt: the end now, when it
    lies between where the attempt began and what it meant to write (the lease kept other copiers
    out), so that the next attempt knows those records as its own even if the source's log start
    has since moved past them (records deleted while copying); else `own_end` as it was."""
    if attempted < 0:
        return own_end
    try:
        with shared_admin(target) as admin:
            _, end = admin.watermarks(unit.target_topic, unit.partition)
    except KmigrateError:
        return own_end
    return end if (own_end is None or end >= own_end) and end <= attempted else own_end


def _copy_once(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, options: CopyOptions,
               resume_map: Sequence[OffsetRun], own_end: int | None, attempted: list[int] | None = None
               ) -> PartitionResult:
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    # a cluster not answering is waited for no longer than the copy keeps resuming (a mirror's: seconds)
    timeout_s = min(30.0, options.retry_for_s)
    with shared_admin(source, timeout_s) as source_admin, shared_admin(target, timeout_s) as target_admin:
        if options.ends_read is not None:
            source_low, source_stable = options.ends_read[:2]
        else:
            source_low, source_stable = source_admin.watermarks(topic, partition)  # read_committed: the LSO
        if end > source_stable:
            _not_ready(source, source_admin, topic, partition, end, source_stable)
        if source_low > end and options.live:
            unit = dataclasses.replace(unit, end_offset=source_low)  # aligned to it; the next round goes on
        elif source_low > end:
            raise SourceNotReady(
                f"{topic}[{partition}]: the source's log start {source_low} moved past the snapshot end {end} "
                "(retention deleted the records); take a new snapshot", topic=topic, partition=partition)
        if unit.mode == TRANSLATE:
            return copy_translate(source, target, unit, options, source_low, target_admin, resume_map)
        writer = Writer(target, unit.target_topic, partition, target_admin, options, transactional=True)
        try:
            result = copy_preserve(source, target, unit, options, source_low, source_admin, target_admin, writer,
                                   own_end)
        except BaseException as exc:
            if attempted is not None:
                attempted[0] = max(attempted[0], writer.next_offset + 1)  # + 1: a marker after the last write
            writer.abandon()
            repeated = repeats.explain(target, exc)  # a marker the target's coordinator wrote twice, named
            if repeated is not None:
                raise repeated from exc
            raise
        writer.close()
        return result


def _not_ready(source: ClusterConfig, source_admin: ClusterAdmin, topic: str, partition: int, end: int,
               stable: int) -> None:
    """Raise SourceNotReady for a unit that ends past the source's last stable offset: an open
    transaction holds it back (named, with its producer where the broker tells), or the source's log
    is shorter than the unit (truncated, or another cluster)."""
    high = source_admin.end_offsets([(topic, partition)], retry=True)[(topic, partition)]
    if end <= high:
        raise SourceNotReady(
            f"{topic}[{partition}]: the copy is to end at offset {end}, but "
            f"{txn_wire.describe_open(source, topic, partition, stable)} holds the source's last stable offset "
            f"at {stable}; what lies beyond it is not decided yet. A pre-copy round ends at the stable offset and "
            "leaves such a transaction for later; inside the cutover window the quiesce waits for it. Let its "
            "producer commit or abort it (or wait for its transaction.timeout.ms, after which the broker aborts it), "
            "then retry", topic=topic, partition=partition)
    raise SourceNotReady(
        f"{topic}[{partition}]: the copy is to end at offset {end}, beyond the source's end {high}: the source "
        "partition is shorter than when the plan was made (truncated by an unclean leader election, or deleted and "
        "created again), or the plan is of another cluster. Take a new snapshot (a new run)",
        topic=topic, partition=partition)
