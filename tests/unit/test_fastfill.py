"""The hand-built filler RecordBatch is a valid Kafka v2 batch (decoded here field by field)."""
from __future__ import annotations

import struct

import crc32c
import zstandard

from kmigrate import fastfill
from kmigrate.records import FILLER_HEADER, FILLER_KEY


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos


def test_varint_zigzag():
    assert fastfill._varint(0) == b"\x00" and fastfill._varint(-1) == b"\x01" and fastfill._varint(1) == b"\x02"
    assert fastfill._varint(64) == b"\x80\x01"
    for value in (0, 1, -1, 63, 64, 8191, 8192, 10**6, -(10**6)):
        assert read_varint(fastfill._varint(value), 0) == (value, len(fastfill._varint(value)))


def test_filler_batch_decodes_as_a_v2_batch_of_fillers():
    count = 70_000
    batch = fastfill.filler_batch(count)
    base_offset, length, leader_epoch, magic, crc = struct.unpack_from(">qiibI", batch, 0)
    assert base_offset == 0 and length == len(batch) - 12 and magic == 2
    assert crc == crc32c.crc32c(batch[21:])
    attributes, last_delta, _t0, _t1, producer_id, _epoch, _seq, records = struct.unpack_from(">hiqqqhii", batch, 21)
    assert attributes & 0x7 == fastfill.COMPRESSION_ZSTD and not attributes & 0x30  # not transactional/control
    assert last_delta == count - 1 and records == count and producer_id == -1
    data = zstandard.ZstdDecompressor().decompress(batch[61:], max_output_size=100 * count)
    pos = 0
    for expected_delta in range(count):
        length, pos = read_varint(data, pos)
        end = pos + length
        pos += 1  # attributes
        _ts, pos = read_varint(data, pos)
        delta, pos = read_varint(data, pos)
        assert delta == expected_delta
        key_len, pos = read_varint(data, pos)
        assert data[pos:pos + key_len] == FILLER_KEY
        pos += key_len
        value_len, pos = read_varint(data, pos)
        assert value_len == -1
        headers, pos = read_varint(data, pos)
        name_len, pos = read_varint(data, pos)
        assert headers == 1 and data[pos:pos + name_len] == FILLER_HEADER.encode()
        pos = end
    assert pos == len(data)
