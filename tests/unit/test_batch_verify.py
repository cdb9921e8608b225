"""The batch comparison's rule for a pair of batches, and the multi-partition Fetch's bytes (pure bytes)."""
from __future__ import annotations

import dataclasses
import random
import struct

import crc32c
from kmigrate.copy import fastfill
from kmigrate.kafka import merge, multi, wire
from kmigrate.run.verify.batches import Prefix, _pair, _take

from tests.support.wire import as_fetched, random_batches


def copied(batch: bytes, base_offset: int) -> wire.Batch:
    """`batch` as the copier leaves it on the target: another producer, another leader epoch."""
    return wire.parse_batches(as_fetched(batch, base_offset, 0, producer_id=900 + base_offset))[0]


def on_source(batch: bytes, base_offset: int, attributes: int = 0) -> wire.Batch:
    return wire.parse_batches(as_fetched(batch, base_offset, attributes, producer_id=42))[0]


def test_a_copied_batch_pairs_with_its_source_and_counts_its_records():
    prefix = Prefix(100, 100)
    assert _pair(prefix, on_source(fastfill.filler_batch(10), 100), copied(fastfill.filler_batch(10), 100), 200)
    assert _pair(prefix, on_source(fastfill.filler_batch(5), 110), copied(fastfill.filler_batch(5), 110), 200)
    assert (prefix.end, prefix.records) == (115, 15)
    # the hash is of the content alone: the same pairs from another producer on the target hash alike
    again = Prefix(100, 100)
    assert _pair(again, on_source(fastfill.filler_batch(10), 100), on_source(fastfill.filler_batch(10), 100), 200)
    assert _pair(again, on_source(fastfill.filler_batch(5), 110), copied(fastfill.filler_batch(5), 110), 200)
    assert again.content_hash.digest() == prefix.content_hash.digest()


def test_a_pair_that_differs_in_anything_the_copy_keeps_is_refused():
    source = on_source(fastfill.filler_batch(10), 0)
    other_records = copied(fastfill.filler_batch(10, keyed=True), 0)
    assert not _pair(Prefix(0, 0), source, other_records, 100)

    later = bytearray(copied(fastfill.filler_batch(10), 0).data)
    struct.pack_into(">q", later, 27, 5)  # another base timestamp, CRC made right again
    struct.pack_into(">I", later, 17, crc32c.crc32c(bytes(later[21:])))
    assert not _pair(Prefix(0, 0), source, wire.parse_batches(bytes(later))[0], 100)

    corrupt = bytearray(copied(fastfill.filler_batch(10), 0).data)
    corrupt[17] ^= 0xFF  # the target's bytes do not match its CRC
    assert not _pair(Prefix(0, 0), source, wire.parse_batches(bytes(corrupt))[0], 100)


def test_only_plain_batches_at_the_prefix_end_inside_the_window_pair():
    batch = fastfill.filler_batch(10)
    assert not _pair(Prefix(0, 0), on_source(batch, 10), copied(batch, 10), 100)  # a gap before it
    assert not _pair(Prefix(0, 0), on_source(batch, 0), copied(batch, 0), 9)  # crosses the window's end
    transactional = on_source(batch, 0, attributes=0x10)
    assert not _pair(Prefix(0, 0), transactional, wire.parse_batches(as_fetched(batch, 0, 0x10, 42))[0], 100)


def test_one_fetch_asks_for_every_partition_and_its_answer_is_read_per_partition():
    class Recorder:
        def send(self, api_key, version, body, tail=b""):
            self.sent = (api_key, version, body)
            return 1

    conn = Recorder()
    multi.send_fetch(conn, {("a", 0): 5, ("a", 3): 7, ("b", 1): 0}, partition_max_bytes=1000, max_wait_ms=5,
                     min_bytes=4096)
    api_key, version, body = conn.sent
    assert (api_key, version) == (wire.FETCH, wire.FETCH_VERSION)
    assert struct.unpack_from(">iii", body, 0) == (-1, 5, 4096)  # replica id, max wait, min bytes
    assert struct.unpack_from(">i", body, 25)[0] == 2  # two topics, after the 25 bytes of the header
    assert body.count(struct.pack(">iiqqi", 3, -1, 7, -1, 1000)) == 1

    records = as_fetched(fastfill.filler_batch(3), 5, 0, 42)

    def partition(index: int, error: int, high: int, blob: bytes, aborted: int = 0) -> bytes:
        return (struct.pack(">ihqqqi", index, error, high, high, 0, aborted) + b"\0" * 16 * aborted
                + struct.pack(">ii", -1, len(blob)) + blob)

    answer = (struct.pack(">ihii", 0, 0, 0, 2) + wire._string("a") + struct.pack(">i", 2)
              + partition(0, 0, 8, records, aborted=1) + partition(3, 6, -1, b"")
              + wire._string("b") + struct.pack(">i", 1) + partition(1, 0, 0, b""))

    class Answer:
        def receive(self):
            return 1, memoryview(answer)

    got = multi.receive_fetch(Answer())
    assert set(got) == {("a", 0), ("a", 3), ("b", 1)}
    assert got[("a", 0)][:2] == (0, 8) and bytes(got[("a", 0)][2]) == records
    assert got[("a", 3)][0] == 6 and not got[("b", 1)][2]


def _as_written(batch: wire.Batch) -> wire.Batch:
    """`batch` as the mirror's in-step write leaves it on the DR cluster: its offset, our producer id, CRC."""
    data = wire.Idempotence(900, 0, 5).stamp(dataclasses.replace(batch, data=bytes(batch.data)).for_produce())
    struct.pack_into(">q", data, 0, batch.base_offset)
    return wire.parse_batches(bytes(data))[0]


def test_a_batch_joined_on_the_way_pairs_with_the_source_batches_it_holds():
    a, b, c, d = random_batches(random.Random(3), 500, 4)
    targets = [_as_written(x) for x in merge.join([a, b, c], 1 << 20)] + [_as_written(d)]
    assert len(targets) == 2
    prefix = Prefix(500, 500)
    assert _take(prefix, [a, b, c, d], targets, 10**6)
    assert (prefix.end, prefix.records) == (d.last_offset + 1, a.records + b.records + c.records + d.records)

    short = Prefix(500, 500)  # the source's answer ends inside the joined batch: the next round reads on
    assert _take(short, [a, b], targets, 10**6) and short.end == 500

    tampered = bytearray(targets[0].data)
    tampered[-1] ^= 1  # the last record's last byte, CRC made right again
    struct.pack_into(">I", tampered, 17, crc32c.crc32c(bytes(tampered[21:])))
    assert not _take(Prefix(500, 500), [a, b, c, d], [wire.parse_batches(bytes(tampered))[0]], 10**6)
