"""Record-batch parsing and the rewrite a batch gets before it is produced again (pure bytes)."""
from __future__ import annotations

import struct

import crc32c
from kmigrate.copy import fastfill
from kmigrate.kafka import wire

from tests.support.wire import as_fetched

COMPRESSION_ZSTD = 4  # the attribute value only; the bytes below are not really compressed


def test_parse_batches_reads_headers_and_drops_a_partial_tail():
    first = as_fetched(fastfill.filler_batch(10), 100, COMPRESSION_ZSTD | 0x10, 42)
    second = as_fetched(fastfill.filler_batch(5), 110, COMPRESSION_ZSTD | 0x20, 42)
    batches = wire.parse_batches(first + second + second[:30])
    assert [(b.base_offset, b.last_offset, b.records) for b in batches] == [(100, 109, 10), (110, 114, 5)]
    assert batches[0].transactional and not batches[0].control and batches[0].dense
    assert batches[1].control and not batches[1].transactional


def test_for_produce_takes_our_producer_state_and_keeps_a_valid_crc():
    fetched = wire.parse_batches(as_fetched(fastfill.filler_batch(10), 1234, COMPRESSION_ZSTD | 0x10, 42))[0]
    producer = wire.Idempotence(producer_id=7001, epoch=0, sequence=20)
    out = producer.stamp(fetched.for_produce())
    base_offset, length, epoch, magic, crc = struct.unpack_from(">qiibI", out, 0)
    attributes, last_delta, _t0, _t1, producer_id, producer_epoch, sequence, count = struct.unpack_from(">hiqqqhii", out, 21)
    assert (base_offset, length, magic) == (0, len(out) - 12, 2)
    assert crc == crc32c.crc32c(out[21:])
    assert attributes == COMPRESSION_ZSTD  # transactional bit cleared, compression kept
    assert (producer_id, producer_epoch, sequence) == (7001, 0, 20)  # the source's producer is not ours
    assert (last_delta, count) == (9, 10)
    assert out[61:] == fetched.data[61:]  # the records themselves travel unchanged
    assert producer.sequence == 30  # the next batch follows this one's 10 records


def test_sequence_numbers_wrap_like_the_brokers():
    producer = wire.Idempotence(producer_id=1, epoch=0, sequence=(1 << 31) - 4)
    first = bytes(producer.stamp(fastfill.filler_batch(10)))
    assert struct.unpack_from(">i", first, 53)[0] == (1 << 31) - 4
    assert producer.sequence == 6


def test_a_cached_filler_batch_is_stamped_in_a_copy():
    cached = fastfill.filler_batch(5)
    before = bytes(cached)
    wire.Idempotence(producer_id=9, epoch=1).stamp(cached)
    assert fastfill.filler_batch(5) == before


def old_message(offset: int, magic: int, key: bytes, value: bytes) -> bytes:
    """One entry of a message set of format v0 or v1, as a 2.x broker serves it (the CRC is not read)."""
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 1_700_000_000_000) if magic else b"")
    body += struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", 0) + body
    return struct.pack(">qi", offset, len(message)) + message


def test_messages_of_formats_v0_and_v1_are_legacy_entries_for_the_record_path():
    v2 = as_fetched(fastfill.filler_batch(3), 12, 0, 42)
    blob = old_message(10, 0, b"k", b"v") + old_message(11, 1, b"k", b"") + v2 + old_message(15, 0, b"", b"x")[:9]
    batches = wire.parse_batches(blob)
    assert [(b.base_offset, b.last_offset, b.magic, b.legacy) for b in batches] == [
        (10, 10, 0, True), (11, 11, 1, True), (12, 14, 2, False)]  # a partial tail is dropped
    # a small v0 message at the end of a fetch (shorter than a v2 header) is read too
    assert [b.last_offset for b in wire.parse_batches(old_message(3, 0, b"", b""))] == [3]


def test_the_admin_retries_the_leadership_errors_of_a_restarted_broker():
    # A broker just restarted answers ListOffsets with UNKNOWN_LEADER_EPOCH until its metadata
    # catches up; librdkafka does not flag that retriable, so the admin must name it itself.
    from kmigrate.kafka.admin import RETRIABLE
    leadership = {5, 6, 9, 74, 75, 78}  # LEADER_NOT_AVAILABLE .. OFFSET_NOT_AVAILABLE
    assert leadership <= {int(code) for code in RETRIABLE}


def _batches(*shapes: tuple[int, int, int]) -> list[wire.Batch]:
    """Fetched batches of (base offset, records, attributes)."""
    return wire.parse_batches(b"".join(as_fetched(fastfill.filler_batch(n), base, attrs, 42) for base, n, attrs in shapes))


def test_a_batch_that_ends_where_the_copy_ends_goes_whole_when_a_plain_batch_follows_it():
    from kmigrate.copy.preserve import _copy_whole

    # a live source: the copy ends at 20 (its stable offset when read), the fetch returned more after it
    assert _copy_whole(_batches((10, 10, 0), (20, 5, 0)), 0, 10, 20, source_high=25)
    # nothing fetched after it, though the source has more: what follows decides (the record path)
    assert not _copy_whole(_batches((10, 10, 0)), 0, 10, 20, source_high=25)
    # the source's end: nothing can follow
    assert _copy_whole(_batches((10, 10, 0)), 0, 10, 20, source_high=20)
    # a transaction's records or a marker at the copy's end: its last record may need a commit marker after it
    assert not _copy_whole(_batches((10, 10, 0), (20, 5, 0x10)), 0, 10, 20, source_high=25)
    assert not _copy_whole(_batches((10, 10, 0), (20, 1, 0x30)), 0, 10, 20, source_high=25)
    # a gap after it (compaction) is not a record at the copy's end
    assert not _copy_whole(_batches((10, 10, 0), (21, 5, 0)), 0, 10, 20, source_high=26)
    # the batch past the copy's end never goes
    assert not _copy_whole(_batches((10, 10, 0), (20, 5, 0), (25, 5, 0)), 1, 10, 20, source_high=30)
