"""The hand-built filler RecordBatch is a valid Kafka v2 batch (decoded here field by field)."""
from __future__ import annotations

import struct

import crc32c
from kmigrate.copy import fastfill
from kmigrate.kafka.records import FILLER_HEADER, FILLER_KEY
from kmigrate.kafka.varint import varint

from tests.support.wire import read_varint


def test_varint_zigzag():
    assert varint(0) == b"\x00" and varint(-1) == b"\x01" and varint(1) == b"\x02"
    assert varint(64) == b"\x80\x01"
    for value in (0, 1, -1, 63, 64, 8191, 8192, 10**6, -(10**6)):
        assert read_varint(varint(value), 0) == (value, len(varint(value)))


def decode(batch: bytes) -> list[tuple[int, bytes | None, list[bytes]]]:
    """(offset delta, key, header names) of each record of an uncompressed v2 batch."""
    base_offset, length, leader_epoch, magic, crc = struct.unpack_from(">qiibI", batch, 0)
    assert base_offset == 0 and length == len(batch) - 12 and magic == 2
    assert crc == crc32c.crc32c(batch[21:])
    attributes, last_delta, _t0, _t1, producer_id, _epoch, _seq, count = struct.unpack_from(">hiqqqhii", batch, 21)
    assert attributes == fastfill.COMPRESSION_NONE  # and neither transactional nor control
    assert last_delta == count - 1 and producer_id == -1
    data, pos, out = batch[61:], 0, []
    for _ in range(count):
        length, pos = read_varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        _ts, pos = read_varint(data, pos)
        delta, pos = read_varint(data, pos)
        key_len, pos = read_varint(data, pos)
        key = None if key_len < 0 else data[pos:pos + key_len]
        pos += max(key_len, 0)
        value_len, pos = read_varint(data, pos)
        assert value_len == -1
        headers, pos = read_varint(data, pos)
        names = []
        for _ in range(headers):
            name_len, pos = read_varint(data, pos)
            names.append(data[pos:pos + name_len])
            pos += name_len
            value_len, pos = read_varint(data, pos)
            pos += value_len
        assert pos == end
        out.append((delta, key, names))
    assert pos == len(data)
    return out


def test_filler_batch_is_a_v2_batch_whose_last_record_is_marked():
    count = 70_000
    records = decode(fastfill.filler_batch(count))
    assert [delta for delta, _, _ in records] == list(range(count))
    assert records[-1][1:] == (FILLER_KEY, [FILLER_HEADER.encode()])
    assert all(key is None and not names for _, key, names in records[:-1])


def test_keyed_filler_batch_gives_every_record_a_key():
    records = decode(fastfill.filler_batch(300, keyed=True))
    assert all(key == fastfill.ANONYMOUS_KEY for _, key, _ in records[:-1])
    assert records[-1][1:] == (FILLER_KEY, [FILLER_HEADER.encode()])


def test_a_one_record_batch_is_the_marked_record():
    assert decode(fastfill.filler_batch(1)) == [(0, FILLER_KEY, [FILLER_HEADER.encode()])]
