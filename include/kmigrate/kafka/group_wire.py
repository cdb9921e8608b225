"""A consumer group's committed offsets read and written over the raw connection: FindCoordinator v1,
OffsetFetch v5 and OffsetCommit v5 (Kafka 2.1 through 4.x).

Through confluent-kafka an offset's metadata is a C string both ways: read, it is taken to its first
zero byte, so a metadata written without one (Java clients: Kafka Streams commits its partition time
there) comes back with whatever bytes follow it in memory; written, it gets a zero byte appended. A
migration copies the metadata and compares it before and after, so it reads and writes it here,
byte for byte. A few calls a run: each opens its own connections."""
from __future__ import annotations

import struct
import time
from collections.abc import Mapping

from kmigrate.config import ClusterConfig
from kmigrate.errors import GroupError
from kmigrate.kafka import wire
from kmigrate.kafka.transport import Transport

OFFSET_FETCH, OFFSET_COMMIT = 9, 8
_RETRY = frozenset({7, 13, 14, 15, 16})  # the coordinator loading, moving or not there yet


def _ask_coordinator(cluster: ClusterConfig, group: str, api: int, version: int, body: bytes, parse,  # noqa: ANN001
                     timeout_s: float):
    """Send `body` as request `api` v`version` to the group's coordinator; `parse(answer)` gives
    (result, error code). Asked again while the coordinator loads, moves or is not there yet; the
    coordinator is looked up through each bootstrap server in turn (one gone is not waited for)."""
    transport = Transport.of(cluster)
    deadline = time.monotonic() + timeout_s
    servers, tries = cluster.addresses, 0
    while True:
        try:
            with wire.BrokerConnection(*servers[tries % len(servers)], timeout_s=wire.time_left(deadline),
                                       transport=transport) as conn:
                code, (host, port) = wire.find_coordinator(conn, group, wire.GROUP_COORDINATOR)
            if not code:
                with wire.BrokerConnection(host, port, timeout_s=wire.time_left(deadline), transport=transport) as conn:
                    conn.send(api, version, body)
                    _, data = conn.receive()
                result, code = parse(data)
                if not code:
                    return result
            if code not in _RETRY:
                raise GroupError(f"{cluster.name}: {'reading' if api == OFFSET_FETCH else 'writing'} the offsets of "
                                 f"consumer group {group!r} failed: {wire.error_name(code)}", group=group)
        except OSError as exc:  # a broker restarting: asked again, through the next bootstrap server
            code = str(exc)
        tries += 1
        if time.monotonic() > deadline:
            raise GroupError(f"{cluster.name}: the offsets of consumer group {group!r} could not be read or written in "
                             f"{timeout_s:.0f} s (last: {code})", group=group)
        time.sleep(0.1)


def committed(cluster: ClusterConfig, group: str, timeout_s: float = 30.0) -> dict[tuple[str, int], tuple[int, str]]:
    """{(topic, partition): (offset, metadata)} of everything `group` committed (OffsetFetch v5)."""
    return _ask_coordinator(cluster, group, OFFSET_FETCH, 5, wire._string(group) + struct.pack(">i", -1), _offsets,
                            timeout_s)


def commit(cluster: ClusterConfig, group: str, offsets: Mapping[tuple[str, int], tuple[int, str]],
           timeout_s: float = 30.0) -> None:
    """Commit `offsets` ({(topic, partition): (offset, metadata)}) for `group`, which must have no
    members (OffsetCommit v5 outside any generation); each metadata as it is, byte for byte."""
    topics: dict[str, list[tuple[int, int, str]]] = {}
    for (topic, partition), (offset, metadata) in sorted(offsets.items()):
        topics.setdefault(topic, []).append((partition, offset, metadata))
    parts = [wire._string(group), struct.pack(">i", -1), wire._string(""), struct.pack(">i", len(topics))]
    for topic, entries in topics.items():
        parts += [wire._string(topic), struct.pack(">i", len(entries))]
        parts += [struct.pack(">iq", partition, offset) + wire._string(metadata) for partition, offset, metadata in entries]
    _ask_coordinator(cluster, group, OFFSET_COMMIT, 5, b"".join(parts), _committed_answer, timeout_s)


def _committed_answer(data: memoryview) -> tuple[None, int]:
    """An OffsetCommit v5 answer: the first partition error code, or 0."""
    (topics,) = struct.unpack_from(">i", data, 4)
    pos = 8
    for _ in range(topics):
        _, pos = wire.read_string(data, pos)
        (partitions,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(partitions):
            _index, error = struct.unpack_from(">ih", data, pos)
            pos += 6
            if error:
                return None, error
    return None, 0


def _offsets(data: memoryview) -> tuple[dict[tuple[str, int], tuple[int, str]], int]:
    """An OffsetFetch v5 answer: ({(topic, partition): (offset, metadata)}, the group's error code)."""
    (topics,) = struct.unpack_from(">i", data, 4)
    pos, found = 8, {}
    for _ in range(topics):
        topic, pos = wire.read_string(data, pos)
        (partitions,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(partitions):
            partition, offset, _epoch = struct.unpack_from(">iqi", data, pos)
            metadata, pos = wire.read_string(data, pos + 16)
            (error,) = struct.unpack_from(">h", data, pos)
            pos += 2
            if not error and offset >= 0:
                found[(topic, partition)] = (offset, metadata or "")
    (code,) = struct.unpack_from(">h", data, pos)
    return found, code
