"""Preserve mode: one partition copied so that every record keeps its offset (docs/DESIGN.md §4):
resume checks, the copy loop over whole batches and single records, gaps and lone markers."""
from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.copy.align import align, trim_below
from kmigrate.copy.fence import fence_earlier, high_water_of
from kmigrate.copy.writer import CopyOptions, Writer, contiguous_runs
from kmigrate.errors import CopyError, CopyInterrupted, ForeignTarget, OffsetMismatch, TargetDiverged
from kmigrate.kafka import leaders, transport, wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import (
    ContentDigest,
    compacted_differences_of,
    iter_range,
    partition_digest,
    read_range,
    reader,
    record_of,
    shared_reader,
)
from kmigrate.model import PRESERVE, OffsetRun, PartitionResult, WorkUnit

log = logging.getLogger(__name__)

def copy_preserve(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit, options: CopyOptions,
                   source_low: int, source_admin: ClusterAdmin, target_admin: ClusterAdmin,
                   writer: Writer, own_end: int | None = None) -> PartitionResult:
    topic, partition, end = unit.topic, unit.partition, unit.end_offset
    on_target = unit.target_topic  # the partition's topic on the target (renamed, or the same)
    raw_target = writer.raw
    read = options.ends_read
    if read is not None and options.continues_at == read[3]:
        # the caller read the target's ends just now, where this copier's last copy committed them: the
        # lease kept other copiers out since, so its end is settled and holds no open transaction
        target_low, target_high = read[2], read[3]
        high_water = target_high
    else:
        high_water = leaders.settle(target, on_target, partition, target_admin.client) if raw_target else None
        target_low, target_high = target_admin.watermarks(on_target, partition)  # the log start, the last stable offset
        if high_water is None:
            high_water = high_water_of(target_admin, on_target, partition)
    continues = (options.continues_at is not None and target_high == options.continues_at == high_water
                 and target_high > source_low)
    if high_water > target_low and not continues:
        target_low, target_high = fence_earlier(target, target_admin, writer, on_target, partition, options.run_id)
    result = PartitionResult(topic, partition, PRESERVE, source_low, end, target_high, target_high,
                             target_topic=on_target)
    if target_high == end + 1 and not read_range(target, on_target, partition, end, end + 1) and \
            invisible_run_at(source, source_admin, topic, partition, end) >= 1:
        end = target_high  # an earlier round wrote the commit marker that follows `end` on the source too
    if target_high > end:
        raise ForeignTarget(
            f"{_named(unit)}[{partition}]: the target already holds offsets up to {target_high}, beyond the snapshot end "
            f"{end}: producers already write to the target topic (it may be in use after a cutover), or another copy "
            "wrote it. Nothing was written. Leave this topic out of the run, or migrate it to a target where it does "
            "not exist yet",
            topic=topic, partition=partition)

    started = time.monotonic()
    if target_high <= source_low:
        # a log start on a marker alone: a filler and its commit marker below and at it; a target that
        # an earlier round aligned to it already (the marker was not decided then) gets an abort marker
        # alone there from the copy (`_render_leading_gap`)
        lone_marker = (target_high < source_low and source_low > 0
                       and invisible_run_at(source, source_admin, topic, partition, source_low) == 1)
        target_high = align(source_low, target_low, target_high, on_target, partition, target, target_admin, writer,
                             lone_marker, own_end)
    elif target_low > source_low:
        raise ForeignTarget(
            f"{_named(unit)}[{partition}]: the target's log start {target_low} is above the source's {source_low}; records "
            "the source still has cannot be written below it. The target topic holds data of another copy or "
            "another producer: migrate this topic to a target where it does not exist yet", topic=topic,
            partition=partition)
    elif continues:  # nothing written since this copier's last commit: nothing to fence or compare
        if target_low < source_low:
            options.may_write()
            trim_below(source_low, target_low, 1, on_target, partition, target, target_admin)
    else:
        compared = _check_resume_point(source, target, unit, max(source_low, target_low), target_high,
                                       options, compacted="compact" in writer.topic_configs.get("cleanup.policy", ""))
        if target_low < source_low:
            options.may_write()
            # this run's copy (the manifest says where it left the target) is trimmed even when no
            # visible record was left to compare above the new log start (only markers, aborted records)
            trim_below(source_low, target_low, compared or int(target_high == own_end), on_target, partition, target,
                       target_admin)
    result.align_seconds = time.monotonic() - started
    writer.next_offset = target_high

    started = time.monotonic()
    copy = PreserveCopy(source, source_admin, writer, result, options)
    try:
        if target_high < end:
            if options.raw_batches and transport.raw_capable(source) and raw_target:
                copy.by_batches(source, target, target_high, end)
            else:
                copy.by_records(target_high, end)
            copy.finish(end)
    finally:
        copy.close()
    writer.flush_bulk()
    result.copy_seconds = time.monotonic() - started

    # The target may end one offset past `end`: a commit marker after the last record, where the
    # source has one too (`finish`), or after the alignment filler below a log start on a marker.
    if continues and writer.checked_each_write:  # each batch's response named its offsets; nothing else wrote
        result.target_end = writer.next_offset
    else:
        _, result.target_end = target_admin.watermarks(on_target, partition)
    if result.target_end != max(writer.next_offset, end):
        raise OffsetMismatch(on_target, partition, max(writer.next_offset, end), result.target_end)
    result.fillers, result.markers = writer.fillers, writer.markers
    if result.records:
        result.offset_map = [OffsetRun(result.first_offset, result.first_offset,
                                       result.last_offset - result.first_offset + 1)]
    if options.verify:
        verify_into(source, target, result, source_low)
    return result


def invisible_run_at(source: ClusterConfig, source_admin: ClusterAdmin, topic: str, partition: int,
                     offset: int) -> int:
    """How many offsets from `offset` on are invisible to a read_committed consumer of the source
    (transaction markers, aborted records), as far as it is decided now; 0 when `offset` holds a
    visible record, lies at or beyond the source's end, or starts a transaction still open.

    The answer may grow later (a transaction aborted before its records were sent leaves a marker
    alone after it); what was rendered from it stays valid, since the rest of the run is rendered
    where the next copy resumes (`_render_leading_gap`)."""
    stable = source_admin.stable_ends([(topic, partition)], retry=True)[(topic, partition)]
    if stable <= offset:
        return 0
    with shared_reader(source) as consumer, contextlib.closing(iter_range(consumer, topic, partition, offset,
                                                                          stable)) as chunks:
        for chunk in chunks:  # closed (unassigned) before the reader goes back to its pool
            return chunk[0].offset() - offset
    return stable - offset


class PreserveCopy:
    """The copy loop of preserve mode. Plain record batches are copied whole, byte for byte
    (`by_batches`); everything else goes record by record through librdkafka (`by_records`).
    Both keep one visible record of look-ahead (`held`): a gap of exactly 1 after it means it
    must be written inside a transaction whose commit marker takes the gap's offset."""

    def __init__(self, source: ClusterConfig, source_admin: ClusterAdmin, writer: Writer, result: PartitionResult,
                 options: CopyOptions) -> None:
        self.source = source
        self.source_admin = source_admin
        self.writer = writer
        self.result = result
        self.options = options
        self.held: Any = None
        self._consumer: Any = None

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()

    def _next_visible(self, offset: int) -> None:
        """Settle `held` (and any gap) now that the next visible record is at `offset`."""
        writer = self.writer
        if self.held is not None:
            gap_start = self.held.offset() + 1
            if offset == gap_start:
                writer.write_one(self.held)
            elif offset == gap_start + 1:
                writer.commit_with_marker(self.held)
            else:
                writer.write_one(self.held)
                writer.abort_fillers(gap_start, offset)
            self.held = None
        elif offset > writer.next_offset:
            _render_leading_gap(writer, offset, self.result.topic, self.result.partition)

    def _progress(self, first: int, last: int, records: int, nbytes: int) -> None:
        result = self.result
        result.records += records
        result.bytes += nbytes
        if result.first_offset is None:
            result.first_offset = first
        result.last_offset = last
        if self.options.progress_hook is not None:
            self.options.progress_hook(result.records)

    def by_records(self, start: int, stop: int) -> None:
        writer = self.writer
        topic, partition = self.result.topic, self.result.partition
        if self._consumer is None:
            self._consumer = reader(self.source)
        for chunk in iter_range(self._consumer, topic, partition, start, stop, idle_timeout_s=self.options.idle_timeout_s,
                                idle_check=self.options.may_write):
            for run in contiguous_runs(chunk):
                self._next_visible(run[0].offset())
                held = self.held = run[-1]
                nbytes = writer.write_run(run[:-1]) + len(held.key() or b"") + len(held.value() or b"")
                self._progress(run[0].offset(), held.offset(), len(run), nbytes)
            writer.bulk.poll(0)
            writer.raise_if_failed()

    def by_batches(self, source: ClusterConfig, target: ClusterConfig, start: int, end: int) -> None:
        topic, partition = self.result.topic, self.result.partition
        position = start
        with leaders.connect_to_leader(source, topic, partition, admin=self.source_admin.client) as fetcher, \
                leaders.connect_to_leader(target, self.result.target_topic, partition,
                                          admin=self.writer.admin.client) as sender:
            kept = self.options.raw_producer
            producer = kept.pop() if kept else None
            producer = producer or sender.idempotence()  # one producer id for the raw batches of this attempt
            prefetched = None  # the offset a Fetch was sent for while the last batches were produced
            while position < end:
                if prefetched != position:
                    fetcher.send_fetch(topic, partition, position, self.options.fetch_max_bytes)
                prefetched = None
                error, source_high, blob = fetcher.receive_fetch()
                if error:
                    # OFFSET_OUT_OF_RANGE: the log start moved past `position` (records deleted, retention)
                    # while copying; the next attempt aligns to it
                    failure = CopyInterrupted if error in wire.TRANSIENT or error == 1 else CopyError
                    raise failure(f"{topic}[{partition}]: fetching from the source at offset {position} failed: "
                                  f"{wire.error_name(error)}", topic=topic, partition=partition)
                batches = [b for b in wire.parse_batches(blob) if b.last_offset >= position]
                after = batches[0].last_offset + 1 if len(batches) == 1 else None
                if after is not None and (after < end or after == end < source_high):
                    # one batch filled the fetch: peek at what follows it, to know whether it may go whole
                    _, _, more = fetcher.fetch(topic, partition, batches[0].last_offset + 1, 1)
                    batches += wire.parse_batches(more)[:1]
                if not batches:
                    # nothing readable yet (the stable offset holds back, or only markers follow):
                    # the record path waits for it, with its idle timeout
                    self.by_records(position, end)
                    break
                whole = 0
                while whole < len(batches) and _copy_whole(batches, whole, position, end, source_high):
                    whole += 1
                if whole:
                    position = batches[whole - 1].last_offset + 1
                    if whole == len(batches) and position < end:
                        # the source reads the next batches while the target writes these
                        fetcher.send_fetch(topic, partition, position, self.options.fetch_max_bytes)
                        prefetched = position
                    self._send_batches(sender, producer, batches[:whole])
                else:
                    stop = next((b.base_offset for i, b in enumerate(batches)
                                 if i and _copy_whole(batches, i, position, end, source_high)),
                                batches[-1].last_offset + 1)
                    stop = min(stop, end)
                    self.by_records(position, stop)
                    position = stop
            if kept is not None:
                kept.append(producer)  # every batch landed: the next copy goes on with its sequence

    def _send_batches(self, sender: wire.BrokerConnection, producer: wire.Idempotence,
                      batches: list[wire.Batch]) -> None:
        writer = self.writer
        on_target, partition = self.result.target_topic, self.result.partition
        self._next_visible(batches[0].base_offset)
        writer.flush_bulk()  # what librdkafka holds goes first: one writer at a time
        writer.options.may_write()
        wire.produce_at(sender, on_target, partition, ((b.for_produce(), b.base_offset) for b in batches),
                        "a copied record batch", producer=producer)
        writer.next_offset = batches[-1].last_offset + 1
        self.result.whole_batches += len(batches)
        self.result.whole_records += sum(b.records for b in batches)
        self._progress(batches[0].base_offset, batches[-1].last_offset, sum(b.records for b in batches),
                       sum(len(b.data) for b in batches))

    def finish(self, end: int) -> None:
        """Write the held record and the gap after it up to `end`. When the held record is the
        last offset before `end`, what follows it on the source decides how: a lone transaction
        marker at `end` must be a commit marker after it (written now, so the target ends at
        `end + 1`); the next round could not put one there."""
        writer, held = self.writer, self.held
        if held is not None:
            tail = end - (held.offset() + 1)
            if tail == 0:
                topic, partition = self.result.topic, self.result.partition
                tail = 1 if invisible_run_at(self.source, self.source_admin, topic, partition, end) == 1 else 0
            if tail == 1:
                writer.commit_with_marker(held)
            else:
                writer.write_one(held)
                if tail >= 2:
                    writer.abort_fillers(held.offset() + 1, end)
            self.held = None
        elif writer.next_offset < end:
            _render_leading_gap(writer, end, self.result.topic, self.result.partition)


def _copy_whole(batches: list[wire.Batch], index: int, position: int, end: int, source_high: int) -> bool:
    """Whether batches[index] can be copied byte for byte: a plain batch (not transactional, not
    a marker, no record removed by compaction, no delete horizon, CreateTime) entirely inside [position, end), whose
    next offset is known to hold a visible record or is the source's end. (A gap of exactly 1
    after it would need its last record inside a transaction.) The next offset may lie at `end`
    or past it: a live source's fetch returns what was written since the copy's end was read, and
    a plain batch there tells that the offset after the copy's last holds a record."""
    batch = batches[index]
    if (batch.legacy or batch.base_offset < position or batch.last_offset >= end or batch.transactional
            or batch.control or not batch.dense or batch.log_append_time or batch.delete_horizon):
        return False
    if batch.last_offset + 1 == end and source_high <= end:
        return True
    if index + 1 == len(batches):
        return False
    following = batches[index + 1]
    return (following.base_offset == batch.last_offset + 1 and not following.transactional
            and not following.control and following.dense and not following.legacy)


def _render_leading_gap(writer: Writer, until: int, topic: str, partition: int) -> None:
    """A gap that starts where this copy starts, with no record of this copy before it: the rest of
    an invisible run that an earlier round or attempt rendered in part (a round ends wherever the
    source is stable, and a run of markers can grow after it: a producer that aborts before its
    records were sent leaves a marker alone), or a compaction gap at the seam. A gap of 1 is an abort
    marker alone; longer ones are aborted fillers and their marker, as everywhere."""
    if until - writer.next_offset == 1:
        if not writer.raw:
            raise TargetDiverged(
                f"{topic}[{partition}]: source offset {writer.next_offset} is a transaction marker alone, right where "
                "this copy resumes; rendering it needs a transaction without records, which the copier writes over "
                "its own connection, and this target's security settings are ones that connection does not speak "
                "(see the log). Nothing was written. Copy this topic in one round (pre_copy off) or in translate "
                "mode (translate_topics)", topic=topic, partition=partition)
        writer.lone_marker(commit=False)
        return
    writer.abort_fillers(writer.next_offset, until)


def _check_resume_point(source: ClusterConfig, target: ClusterConfig, unit: WorkUnit,
                        low: int, target_high: int, options: CopyOptions, compacted: bool = False) -> int:
    """The target's last records must be the source's records at the same offsets (docs/DESIGN.md §4.3);
    returns how many were compared (0: no visible record in [low, target_high)). On a compacted
    topic the source's cleaner may have removed records since they were copied (and the target's
    its own): every record the source still holds there must be on the target unchanged, unless the
    target superseded it, and at least one must be."""
    topic, partition, on_target = unit.topic, unit.partition, unit.target_topic
    window = options.resume_window
    while True:
        start = max(low, target_high - window)
        if compacted:
            on_source = read_range(source, topic, partition, start, target_high)
            _, problems = compacted_differences_of(
                map(record_of, on_source), lambda: map(record_of, read_range(target, on_target, partition, start,
                                                                             target_high)),
                target_only_ok=True)
            if problems:
                raise _diverged(unit, (start, target_high), problems[0])
            compared = len(on_source)
        else:
            there = [_fingerprint(m) for m in read_range(target, on_target, partition, start, target_high)]
            here = [_fingerprint(m) for m in read_range(source, topic, partition, start, target_high)]
            if there != here:
                first = next((i for i, (a, b) in enumerate(zip(there, here)) if a != b), min(len(there), len(here)))
                at = there[first][0] if first < len(there) else here[first][0] if first < len(here) else target_high
                raise _diverged(unit, (start, target_high), f"first difference at offset {at}")
            compared = len(there)
        if compared or start == low:
            return compared
        window *= 8


def _named(unit: WorkUnit) -> str:
    """A partition's topic as a message names it: with its name on the target where renamed."""
    return f"{unit.topic} ({unit.target_topic} on the target)" if unit.renamed else unit.topic


def _diverged(unit: WorkUnit, window: tuple[int, int], detail: str) -> TargetDiverged:
    topic, partition = unit.topic, unit.partition
    return TargetDiverged(
        f"{_named(unit)}[{partition}]: the target's records before its end {window[1]} differ from the source's "
        f"({detail}), so it is not a copy of this partition: another producer wrote to it, or it holds another "
        "source's data. Nothing was written. Stop whatever writes to the target topic; if it is not in use, migrate "
        "this topic to a target where it does not exist yet", topic=topic, partition=partition, window=window)


def _fingerprint(msg: Any) -> tuple[int, str]:
    digest = ContentDigest()
    digest.update_message(msg)
    return msg.offset(), digest.hexdigest()


def verify_into(source: ClusterConfig, target: ClusterConfig, result: PartitionResult, start: int) -> None:
    """Digest both sides over [start, end) and store them in `result`."""
    started = time.monotonic()
    end = max(result.end_offset, result.target_end)
    result.source_digest = partition_digest(source, result.topic, result.partition, start, end).hexdigest()
    result.target_digest = partition_digest(target, result.target_topic, result.partition, start, end).hexdigest()
    result.digests_equal = result.source_digest == result.target_digest
    result.verify_seconds = time.monotonic() - started
