"""A transaction marker the target's coordinator wrote twice (docs/DESIGN.md §11).

A transaction coordinator that sent a partition's marker and got no answer (the partition's leader
failed after it appended the marker and replicated it, or the coordinator itself moved before it
recorded the transaction's end) sends the marker again, and the new leader appends it a second
time: Kafka 4.3 does not take the repeat for the one it already has. On a target, that offset then
holds a marker where the source holds what the copier was to write there, and no copy can put the
source's data back at its offset (a log's end cannot be cut). The copier's checks stop there already
(a write landing late, a resume point whose records differ from the source's); `explain` tells
that cause from another writer's records, so that the error says what happened and the way out.
Read-only; over the raw connection (a target it cannot reach that way keeps the general error)."""
from __future__ import annotations

import logging
import struct

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyError, OffsetMismatch, RepeatedMarker, TargetDiverged
from kmigrate.kafka import leaders, transport, wire
from kmigrate.kafka.pool import shared_admin
from kmigrate.kafka.varint import varint_at

log = logging.getLogger(__name__)

LOOKBACK = 5_000          # offsets read before the range the checks flagged, for the marker repeated there
READ_BYTES = 32 << 20     # at most this much of the target read to find it


def explain(target: ClusterConfig, exc: BaseException) -> CopyError | None:
    """A RepeatedMarker for `exc` when the offsets it names hold a repeated marker of the target's
    coordinator; None otherwise (another cause, or the target not readable now)."""
    if isinstance(exc, OffsetMismatch) and exc.actual > exc.expected:
        window = (exc.expected, exc.actual)
    elif isinstance(exc, TargetDiverged) and exc.window is not None:
        window = exc.window
    else:
        return None
    try:
        found = find(target, exc.topic, exc.partition, *window)
    except Exception as read_failed:  # noqa: BLE001 - an explanation only: the check's own error stands
        log.info("%s[%d]: the target not read for a repeated marker (%s)", exc.topic, exc.partition, read_failed)
        return None
    return None if found is None else RepeatedMarker(exc.topic, exc.partition, *found)


def find(target: ClusterConfig, topic: str, partition: int, start: int, end: int) -> tuple[int, int] | None:
    """(offset of a marker, offset of its repeat) for the first marker in [start, end] of the target's
    partition that repeats an earlier one: the same producer id, epoch and kind, with no batch of
    that producer between them (a producer's next transaction writes records first, or ends with
    another epoch). Read from LOOKBACK offsets before `start`."""
    if not transport.raw_capable(target, "the search for a repeated transaction marker",
                                 "a copy stopped by one keeps its general error"):
        return None
    with shared_admin(target) as admin:
        low, _ = admin.watermarks(topic, partition)
    last: dict[tuple[int, int], tuple[int, int]] = {}  # (producer id, epoch) -> (offset, kind) of its last marker
    position, read = max(low, start - LOOKBACK), 0
    with leaders.connect_to_leader(target, topic, partition) as conn:
        while position <= end and read < READ_BYTES:
            error, _high, blob = conn.fetch(topic, partition, position, 1 << 20, max_wait_ms=0)
            if error:
                return None
            read += len(blob)
            batches = [b for b in wire.parse_batches(blob) if b.last_offset >= position and not b.legacy]
            if not batches:
                return None
            for batch in batches:
                if batch.base_offset > end:
                    return None
                producer = struct.unpack_from(">qh", batch.data, 43)
                if not batch.control:
                    last.pop(producer, None)
                    continue
                kind = marker_kind(batch)
                if last.get(producer, (None, None))[1] == kind and batch.base_offset >= start:
                    return last[producer][0], batch.base_offset
                last[producer] = (batch.base_offset, kind)
            position = batches[-1].last_offset + 1
    return None


def marker_kind(batch: wire.Batch) -> int:
    """The control record's type (0 abort, 1 commit) of a control batch."""
    data = memoryview(batch.data)
    pos = 61                        # the first record: its length, attributes, timestamp and offset deltas
    _, pos = varint_at(data, pos)
    _, pos = varint_at(data, pos + 1)
    _, pos = varint_at(data, pos)
    key_length, pos = varint_at(data, pos)
    return struct.unpack_from(">h", data, pos + 2)[0] if key_length >= 4 else -1
