"""Alignment of a target partition's log start with the source's (docs/DESIGN.md §4.2), and the
trim of a resumed target whose log start is below it (§4.3)."""
from __future__ import annotations

import logging

from kmigrate.config import ClusterConfig
from kmigrate.copy import fastfill
from kmigrate.copy.writer import Writer
from kmigrate.errors import CopyError, ForeignTarget, TargetDiverged
from kmigrate.kafka import transport
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import is_filler, read_range

log = logging.getLogger(__name__)


def align(source_low: int, target_low: int, target_high: int, topic: str, partition: int,
           target: ClusterConfig, target_admin: ClusterAdmin, writer: Writer, lone_marker: bool,
           own_end: int | None = None) -> int:
    """Make the target's log start and end both equal the source's log start (docs/DESIGN.md §4.2); returns
    the target's end. `lone_marker`: the source's log start is a lone transaction marker, so the
    last filler goes in a committed transaction whose marker takes that offset, and the target
    ends one past the log start, like the source's invisible offset."""
    if target_high > target_low:
        last = read_range(target, topic, partition, target_high - 1, target_high)
        if target_high == own_end:  # this run's copy, all below the source's log start now
            log.info("%s[%d]: the source's log start %d moved past the end of this run's earlier copy (%d): "
                     "the target is aligned up to it and trimmed", topic, partition, source_low, target_high)
        elif not last or not is_filler(last[-1]):
            raise ForeignTarget(
                f"{topic}[{partition}]: the target holds records below the source's log start {source_low} that "
                "this migration did not write (another copy or another producer); nothing was written. Migrate this "
                "topic to a target where it does not exist yet", topic=topic, partition=partition)
    plain_until = source_low - 1 if lone_marker else source_low
    if target_high < plain_until:
        count = plain_until - target_high
        writer.options.may_write()
        if writer.options.fast_alignment and transport.raw_capable(target, "fast alignment"):
            configs = writer.topic_configs
            fastfill.write_fillers(target, topic, partition, target_high, count,
                                   keyed="compact" in configs["cleanup.policy"],
                                   max_batch_bytes=int(configs["max.message.bytes"]), admin=target_admin.client)
            writer.fillers += count
        else:
            writer.next_offset = target_high
            writer.write_fillers(count)
            writer.flush_bulk()
        target_high = plain_until
    if lone_marker:
        writer.next_offset = target_high
        if target_high == source_low - 1:
            writer.commit_filler()
        elif target_high != source_low + 1:  # else an earlier attempt wrote them
            raise TargetDiverged(
                f"{topic}[{partition}]: the source's log start {source_low} is a lone transaction marker, but the "
                f"target already ends at {target_high} with fillers written outside a transaction (by another copy), "
                "so the marker cannot be put there. Nothing more was written. Migrate this topic to a target where "
                "it does not exist yet", topic=topic, partition=partition)
    if source_low > target_low:
        writer.options.reached("fillers-written")
        writer.options.may_write()
        target_admin.delete_records(topic, partition, source_low)
    expected = (source_low, source_low + 1 if lone_marker else source_low)
    low, high = target_admin.watermarks(topic, partition)
    if (low, high) != expected:
        raise CopyError(f"{topic}[{partition}]: after alignment the target spans [{low}, {high}), expected "
                        f"[{expected[0]}, {expected[1]})", topic=topic, partition=partition)
    return high


def trim_below(source_low: int, target_low: int, compared: int, topic: str, partition: int,
                target: ClusterConfig, target_admin: ClusterAdmin) -> None:
    """A resumed target whose log start is below the source's: the source's retention (or this
    copier's alignment, interrupted before DeleteRecords) left offsets there that the source no
    longer has. They are deleted when the target is known to be this copy: its records at the
    resume point matched the source's, or the offset below the log start is this copier's filler."""
    if not compared:
        below = read_range(target, topic, partition, max(target_low, source_low - 1), source_low)
        if not below or not is_filler(below[-1]):
            raise ForeignTarget(
                f"{topic}[{partition}]: the target holds offsets below the source's log start {source_low} that "
                "cannot be told apart from another writer's; nothing was written. Migrate this topic to a target "
                "where it does not exist yet", topic=topic, partition=partition)
    target_admin.delete_records(topic, partition, source_low)
