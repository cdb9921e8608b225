"""Requests for many partitions of one broker at once: Fetch (v11), ListOffsets (v2), Produce (v7).

A task of many small partitions would otherwise pay a round trip a partition and request kind on
each cluster; with these it pays one a leader (the leaders from `leaders.look_up`), whatever the
number of partitions. Only `send_produce` writes; the copier sends it to the target alone."""
from __future__ import annotations

import struct
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from kmigrate.kafka import throttle, wire

TopicPartition = tuple[str, int]


class Fetched(NamedTuple):
    """One partition of a Fetch response; `records` a view into the response."""

    error: int
    high: int  # the high watermark
    records: memoryview
    stable: int = -1  # the last stable offset
    log_start: int = -1


MISSING = Fetched(-1, -1, memoryview(b""))  # a partition the answer left out


def _topics(partitions: Mapping[TopicPartition, object]) -> dict[str, list[tuple[int, object]]]:
    topics: dict[str, list[tuple[int, object]]] = defaultdict(list)
    for (topic, partition), value in partitions.items():
        topics[topic].append((partition, value))
    return topics


def by_leader(places: Mapping[TopicPartition, tuple[str, int]]) -> dict[tuple[str, int], list[TopicPartition]]:
    grouped: dict[tuple[str, int], list[TopicPartition]] = defaultdict(list)
    for tp, address in places.items():
        grouped[address].append(tp)
    return dict(grouped)


def send_fetch(conn: wire.BrokerConnection, positions: Mapping[TopicPartition, int], partition_max_bytes: int = 1 << 20,
               max_bytes: int = 64 << 20, isolation: int = 0, max_wait_ms: int = 0,
               session: tuple[int, int] = (0, -1), forgotten: Iterable[TopicPartition] = (), min_bytes: int = 1) -> int:
    """Send one Fetch for every partition of `positions` from its offset, not waiting for data
    (max wait 0) unless told (the broker answers once its partitions have `min_bytes`, or after
    `max_wait_ms`); read_uncommitted by default (the caller bounds what it reads by offsets). Outside
    a fetch session unless given one ((id, epoch): `FetchSession`), and its partitions that leave it."""
    topics = _topics(positions)
    parts = [struct.pack(">iiiibii", -1, max_wait_ms, min_bytes, max_bytes, isolation, *session), struct.pack(">i", len(topics))]
    for topic, wanted in topics.items():
        parts += [wire._string(topic), struct.pack(">i", len(wanted))]
        parts += [struct.pack(">iiqqi", partition, -1, offset, -1, partition_max_bytes) for partition, offset in wanted]
    leaving = _topics({tp: None for tp in forgotten})
    parts.append(struct.pack(">i", len(leaving)))
    for topic, gone in leaving.items():
        parts += [wire._string(topic), struct.pack(f">i{len(gone)}i", len(gone), *(partition for partition, _ in gone))]
    parts.append(wire._string(""))
    return conn.send(wire.FETCH, wire.FETCH_VERSION, b"".join(parts))


def receive_fetch(conn: wire.BrokerConnection) -> dict[TopicPartition, Fetched]:
    """The answer to `send_fetch`: a `Fetched` a partition. A request-level error is given to every
    partition of the answer as an empty one with that code."""
    return _read_fetch(conn)[2]


def _read_fetch(conn: wire.BrokerConnection) -> tuple[int, int, dict[TopicPartition, Fetched]]:
    """(request-level error code, session id, a `Fetched` a partition) of a Fetch answer."""
    _, data = conn.receive()
    throttle.note(conn, data, 0)
    _throttle, error_code, session_id, topic_count = struct.unpack_from(">ihii", data, 0)
    out: dict[TopicPartition, Fetched] = {}
    pos = 14
    for _ in range(max(topic_count, 0)):
        (name_len,) = struct.unpack_from(">h", data, pos)
        topic = bytes(data[pos + 2:pos + 2 + name_len]).decode()
        pos += 2 + name_len
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(count):
            partition, code, high, stable, start, aborted = struct.unpack_from(">ihqqqi", data, pos)
            pos += 34 + max(aborted, 0) * 16 + 4  # aborted transactions, preferred read replica
            (length,) = struct.unpack_from(">i", data, pos)
            pos += 4
            out[(topic, partition)] = Fetched(code or error_code, high, data[pos:pos + max(length, 0)], stable, start)
            pos += max(length, 0)
    return error_code, session_id, out


# the Fetches this process's sessions sent, and those that named every partition (a session opened, or
# asked in full again after the broker lost it): a mirror's tasks report them (kmigrate.run.mirror.reports)
_SENT: Counter[str] = Counter()
_SENT_LOCK = threading.Lock()


def fetches_sent() -> dict[str, int]:
    """{"sent": Fetches sent in sessions by this process, "in_full": those naming every partition}."""
    with _SENT_LOCK:
        return {"sent": _SENT["sent"], "in_full": _SENT["in_full"]}


class FetchSession:
    """An incremental fetch session (KIP-227) with one broker, for Fetches sent one after another on
    one connection. The first Fetch names every partition and opens the session; each one after
    names only the partitions whose position moved or that joined, and those that left, and its
    answer holds only the partitions with news (records, a high watermark or log start moved, an
    error): a partition left out of an answer has nothing new. Both sides then read and write a few
    partitions a turn, not all of them. A broker that keeps no session for it (its cache full) is
    asked in full each time; one that lost the session is asked in full again."""

    LOST = frozenset({70, 71})  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH

    def __init__(self) -> None:
        self.id = self.epoch = 0
        self.sent: dict[TopicPartition, int] = {}

    def send(self, conn: wire.BrokerConnection, positions: Mapping[TopicPartition, int], **options) -> int:  # noqa: ANN003
        """`send_fetch` of `positions` (every partition the session follows) in the session."""
        sent, self.sent = self.sent, dict(positions)
        with _SENT_LOCK:
            _SENT["sent"] += 1
            _SENT["in_full"] += not self.id
        if not self.id:
            return send_fetch(conn, positions, session=(0, 0), **options)
        return send_fetch(conn, {tp: o for tp, o in positions.items() if sent.get(tp) != o}, session=(self.id, self.epoch),
                          forgotten=[tp for tp in sent if tp not in positions], **options)

    def receive(self, conn: wire.BrokerConnection) -> dict[TopicPartition, Fetched]:
        """The answer to `send`: the partitions with news. The session lost: none (the next Fetch
        names every partition again); another request-level error: every partition with its code."""
        error, session_id, fetched = _read_fetch(conn)
        if error:
            self.id = self.epoch = 0
            return {} if error in self.LOST else {tp: Fetched(error, -1, MISSING.records) for tp in self.sent}
        if not self.id:
            self.id, self.epoch = session_id, 0
        self.epoch = self.epoch % 0x7FFFFFFF + 1 if self.id else 0
        return fetched

    def close(self, conn: wire.BrokerConnection) -> None:
        """End the session on the broker (a Fetch of its final epoch naming no partition)."""
        if self.id:
            send_fetch(conn, {}, session=(self.id, -1))
            _read_fetch(conn)
            self.id = self.epoch = 0
            self.sent = {}


def send_list_offsets(conn: wire.BrokerConnection, partitions: Iterable[TopicPartition], replica_id: int = -1,
                      timestamp: int = -1, isolation: int = 0) -> int:
    """Ask for the latest offset of each partition: the high watermark (replica id -1), or the
    replica's log end offset (the debugging replica id -2, which a follower answers too); the last
    stable offset with `isolation` 1 (read_committed), the log start offset with `timestamp` -2."""
    topics = _topics({tp: None for tp in partitions})
    parts = [struct.pack(">ibi", replica_id, isolation, len(topics))]
    for topic, wanted in topics.items():
        parts += [wire._string(topic), struct.pack(">i", len(wanted))]
        parts += [struct.pack(">iq", partition, timestamp) for partition, _ in wanted]
    return conn.send(wire.LIST_OFFSETS, 2, b"".join(parts))


def receive_list_offsets(conn: wire.BrokerConnection) -> dict[TopicPartition, tuple[int, int]]:
    """The answer to `send_list_offsets`: (error code, offset) a partition."""
    _, data = conn.receive()
    # after the throttle time: [topic [partition, error code, timestamp, offset]]
    return {tp: (error_code, offset) for tp, (error_code, _ts, offset) in _fixed_entries(data, 4, ">ihqq", 22)}


def send_produce(conn: wire.BrokerConnection, batches: Mapping[TopicPartition, bytes | memoryview],
                 timeout_ms: int = 30_000) -> int:
    """One Produce (acks=all, no transaction) of one record batch for each partition (a v2 Produce
    takes one batch a partition)."""
    topics = _topics(batches)
    parts = [struct.pack(">hhii", -1, -1, timeout_ms, len(topics))]
    for topic, given in topics.items():
        parts += [wire._string(topic), struct.pack(">i", len(given))]
        for partition, batch in given:
            parts += [struct.pack(">ii", partition, len(batch)), batch]
    return conn.send(wire.PRODUCE, wire.PRODUCE_VERSION, b"".join(parts))


def receive_produce(conn: wire.BrokerConnection) -> tuple[int, dict[TopicPartition, tuple[int, int]]]:
    """The answer to `send_produce`: its correlation id, and (error code, base offset) a partition."""
    correlation_id, data = conn.receive()
    # [topic [partition, error code, base offset, log append time, log start offset]], then the throttle time
    throttle.note(conn, data)
    return correlation_id, {tp: (error_code, base_offset)
                            for tp, (error_code, base_offset) in _fixed_entries(data, 0, ">ihq", 30)}


def _fixed_entries(data: memoryview, pos: int, entry: str, size: int):
    """((topic, partition), the entry's other fields) of a response's topics array at `pos`, whose
    partition entries have a fixed `size` in bytes, `entry` the struct format of their first fields."""
    (topic_count,) = struct.unpack_from(">i", data, pos)
    pos += 4
    for _ in range(topic_count):
        (name_len,) = struct.unpack_from(">h", data, pos)
        topic = bytes(data[pos + 2:pos + 2 + name_len]).decode()
        (count,) = struct.unpack_from(">i", data, pos + 2 + name_len)
        pos += 6 + name_len
        for _ in range(count):
            partition, *fields = struct.unpack_from(entry, data, pos)
            yield (topic, partition), fields
            pos += size
