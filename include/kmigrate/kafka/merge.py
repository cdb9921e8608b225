"""Consecutive record batches joined into one (docs/DESIGN.md §12): a Produce request carries one
batch a partition, so n batches waiting for one partition take n requests one after another (a
broker answers a connection's requests in turn). When the mirror comes back from a stall with tens
of small batches a partition, `join` makes them one batch a partition, each record at its offset
and with its timestamp, key, value and headers, byte for byte.

Only batches that hold together are joined: uncompressed, dense (every offset a record), not
transactional, not control, CreateTime, no delete horizon, each starting where the one before
ends, and the joined batch at most `limit` bytes. Anything else stays as it came. The records of
the first batch of a run keep their bytes; those of the later ones get their offset and timestamp
deltas written again against the first batch's base. Pure Python."""
from __future__ import annotations

from collections.abc import Sequence

from kmigrate.kafka.varint import varint, varint_at
from kmigrate.kafka.wire import BATCH_HEADER as _HEADER, Batch

_SLACK = 10  # bytes a record's length and deltas can grow by when written against another base
_JOINABLE_OFF = 0x07 | 0x08 | 0x10 | 0x20 | 0x40  # compression, LogAppendTime, transactional, control, horizon


def joinable(batch: Batch) -> bool:
    return (batch.magic == 2 and not batch.attributes & _JOINABLE_OFF
            and batch.records == batch.last_offset - batch.base_offset + 1)


def join(batches: Sequence[Batch], limit: int) -> list[Batch]:
    """`batches` (one partition's, in offset order) with each run of joinable ones that follow one
    another joined into batches of at most `limit` bytes."""
    out: list[Batch] = []
    run: list[Batch] = []
    size = 0
    for batch in batches:
        if not joinable(batch):
            out += _joined(run) + [batch]
            run, size = [], 0
            continue
        # its records without the batch header, each record's deltas perhaps a few bytes longer
        grows = len(batch.data) - _HEADER.size + _SLACK * batch.records
        if not run or batch.base_offset != run[-1].last_offset + 1 or size + grows > limit:
            out += _joined(run)
            run, size = [], len(batch.data) + _SLACK * batch.records
        else:
            size += grows
        run.append(batch)
    return out + _joined(run)


def _joined(run: list[Batch]) -> list[Batch]:
    if len(run) < 2:
        return run
    first = run[0]
    (base, _length, epoch, magic, _crc, attributes, _last, base_ts, max_ts, pid, producer_epoch, sequence,
     _count) = _HEADER.unpack_from(first.data, 0)
    body = [bytes(first.data[_HEADER.size:])]
    for batch in run[1:]:
        batch_ts, batch_max_ts = _HEADER.unpack_from(batch.data, 0)[7:9]
        max_ts = max(max_ts, batch_max_ts)
        body.append(_rebased(batch.data, batch.records, batch.base_offset - base, batch_ts - base_ts))
    records = sum(b.records for b in run)
    data = bytearray(_HEADER.size) + b"".join(body)
    _HEADER.pack_into(data, 0, base, len(data) - 12, epoch, magic, 0, attributes, records - 1, base_ts, max_ts, pid,
                      producer_epoch, sequence, records)
    return [Batch(memoryview(data), base, run[-1].last_offset, attributes, records)]


def _rebased(data: bytes | memoryview, count: int, shift_offset: int, shift_ts: int) -> bytes:
    """The records of one batch, their offset deltas moved by `shift_offset` and their timestamp
    deltas by `shift_ts`."""
    view, pos, out = memoryview(data), _HEADER.size, []
    for _ in range(count):
        length, pos = varint_at(view, pos)
        end = pos + length
        attributes = view[pos]
        ts_delta, at = varint_at(view, pos + 1)
        offset_delta, at = varint_at(view, at)
        record = bytes([attributes]) + varint(ts_delta + shift_ts) + varint(offset_delta + shift_offset) + view[at:end]
        out.append(varint(len(record)) + record)
        pos = end
    if pos != len(view):
        raise ValueError(f"a record batch's records end at byte {pos} of {len(view)}")
    return b"".join(out)
