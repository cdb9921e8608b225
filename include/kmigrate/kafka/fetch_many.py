"""Record batches of many partitions in one Fetch request (v11) a broker.

A task of many small partitions would otherwise pay a fetch round trip a partition on each
cluster; here it pays one Fetch a leader a round (the leaders from `leaders.look_up`), whatever
the number of partitions. Read-only: nothing here writes to any cluster."""
from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Mapping

from kmigrate.kafka import wire

TopicPartition = tuple[str, int]
Fetched = tuple[int, int, memoryview]  # (error code, high watermark, records)


def by_leader(places: Mapping[TopicPartition, tuple[str, int]]) -> dict[tuple[str, int], list[TopicPartition]]:
    grouped: dict[tuple[str, int], list[TopicPartition]] = defaultdict(list)
    for tp, address in places.items():
        grouped[address].append(tp)
    return dict(grouped)


def send_fetch(conn: wire.BrokerConnection, positions: Mapping[TopicPartition, int], partition_max_bytes: int = 1 << 20,
               max_bytes: int = 64 << 20, isolation: int = 0) -> int:
    """Send one Fetch for every partition of `positions` from its offset, not waiting for data
    (max wait 0); read_uncommitted by default (the caller bounds what it reads by offsets)."""
    topics: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for (topic, partition), offset in positions.items():
        topics[topic].append((partition, offset))
    parts = [struct.pack(">iiiibii", -1, 0, 1, max_bytes, isolation, 0, -1), struct.pack(">i", len(topics))]
    for topic, wanted in topics.items():
        parts += [wire._string(topic), struct.pack(">i", len(wanted))]
        parts += [struct.pack(">iiqqi", partition, -1, offset, -1, partition_max_bytes) for partition, offset in wanted]
    parts += [struct.pack(">i", 0), wire._string("")]
    return conn.send(wire.FETCH, wire.FETCH_VERSION, b"".join(parts))


def receive_fetch(conn: wire.BrokerConnection) -> dict[TopicPartition, Fetched]:
    """The answer to `send_fetch`: (error code, high watermark, records) a partition, the records a
    view into the response. A request-level error is given to every partition of the answer as
    an empty one with that code."""
    _, data = conn.receive()
    _throttle, error_code, _session, topic_count = struct.unpack_from(">ihii", data, 0)
    out: dict[TopicPartition, Fetched] = {}
    pos = 14
    for _ in range(max(topic_count, 0)):
        (name_len,) = struct.unpack_from(">h", data, pos)
        topic = bytes(data[pos + 2:pos + 2 + name_len]).decode()
        pos += 2 + name_len
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(count):
            partition, code, high, _lso, _start, aborted = struct.unpack_from(">ihqqqi", data, pos)
            pos += 34 + max(aborted, 0) * 16 + 4  # aborted transactions, preferred read replica
            (length,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out[(topic, partition)] = (code or error_code, high, data[pos:pos + max(length, 0)])
            pos += max(length, 0)
    return out
