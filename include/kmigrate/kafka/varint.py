"""The variable-length integers of Kafka's formats: unsigned (the protocol's compact lengths and
tagged fields) and signed under zigzag (a record's length, deltas, key and value lengths). Pure Python."""
from __future__ import annotations


def uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def varint(value: int) -> bytes:
    return uvarint((value << 1) ^ (value >> 63))


def uvarint_at(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The unsigned varint at `pos`, and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def varint_at(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """The signed (zigzag) varint at `pos`, and the position after it."""
    value, pos = uvarint_at(data, pos)
    return (value >> 1) ^ -(value & 1), pos
