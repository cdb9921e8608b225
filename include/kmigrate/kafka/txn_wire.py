"""Transaction requests the copier sends itself, over the raw connection (`wire.BrokerConnection`):

- a marker with no record before it (`lone_marker`): FindCoordinator v1, InitProducerId v1,
  AddPartitionsToTxn v1, EndTxn v1. A transaction that registers a partition and writes nothing
  to it leaves just its marker there; stock Kafka does the same on a source whenever a producer
  aborts a transaction before its records were sent, and that offset is then invisible with no
  record of the same transaction before it. librdkafka cannot register a partition without a
  record, so the copier speaks these four requests itself. Served by Kafka 0.11 through 4.x.
- the fence of an earlier copier (`fence`): FindCoordinator v1 and InitProducerId v1, what a
  transactional producer's start does, without a producer.
- the open transactions of partitions (`open_transactions`): DescribeProducers v0 (KIP-664, Kafka
  2.8 and later), so that an error about a transaction left open names its producer.
- what the coordinators hold of those producers (`coordinator_states`): ListTransactions v0 (KIP-664,
  Kafka 3.0 and later). A transaction open on a partition whose producer's coordinator has ended
  its transactions (`hanging`) gets no marker from it ever: a broker killed while the coordinator
  wrote a commit's markers can leave one, and only an abort by hand (`kafka-transactions.sh abort`)
  ends it.
"""
from __future__ import annotations

import dataclasses
import struct
import time
from collections.abc import Iterable, Mapping

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyError, CopyInterrupted, KmigrateError, MissingAcls
from kmigrate.kafka import leaders, wire
from kmigrate.kafka.pool import shared_admin
from kmigrate.kafka.varint import uvarint, uvarint_at

END_TXN, ADD_PARTITIONS_TO_TXN, DESCRIBE_PRODUCERS, LIST_TRANSACTIONS = 26, 24, 61, 66
# a coordinator's states with no transaction of the producer left to end (its markers written, or none)
ENDED = frozenset({"Empty", "CompleteCommit", "CompleteAbort", "Dead"})
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
# the coordinator loading, moving or busy with the previous transaction's markers: asked again
_RETRY = frozenset({7, 13, 14, 15, 16, 51})
NAMES = {16: "NOT_COORDINATOR", 51: "CONCURRENT_TRANSACTIONS", 53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
         47: "INVALID_PRODUCER_EPOCH", 48: "INVALID_TXN_STATE", 35: "UNSUPPORTED_VERSION"}


def _name(code: int) -> str:
    return NAMES.get(code) or wire.error_name(code)


class _Retry(Exception):
    """An error that passes: the whole exchange is tried again, the coordinator found anew."""


def _check(code: int, what: str, topic: str, partition: int) -> None:
    if not code:
        return
    if code in _RETRY:
        raise _Retry(_name(code))
    raise CopyError(f"{topic}[{partition}]: {what} on the target failed: {_name(code)}; check the target broker log "
                    "and that the migration's principal may use transactional ids prefixed 'kmigrate-'",
                    topic=topic, partition=partition)


def _coordinator(cluster: ClusterConfig, transactional_id: str, topic: str, partition: int) -> tuple[str, int]:
    with leaders.connect_to_leader(cluster, topic, partition) as conn:  # any broker answers FindCoordinator
        code, address = wire.find_coordinator(conn, transactional_id, wire.TRANSACTION_COORDINATOR)
    _check(code, "finding the transaction coordinator", topic, partition)
    return address


def init_producer_id(conn: wire.BrokerConnection, transactional_id: str) -> tuple[int, int, int]:
    """(error code, producer id, epoch) of InitProducerId v1 for `transactional_id`, asked of its
    coordinator behind `conn`."""
    conn.send(wire.INIT_PRODUCER_ID, 1, wire._string(transactional_id) + struct.pack(">i", 60_000))
    _, data = conn.receive()
    _throttle, code, producer_id, epoch = struct.unpack_from(">ihqh", data, 0)
    return code, producer_id, epoch


def fence(cluster: ClusterConfig, topic: str, partition: int, transactional_id: str, timeout_s: float = 60.0) -> None:
    """InitProducerId for `transactional_id`, as a transactional producer's first request: an earlier
    producer of that id is fenced (its epoch bumped) and a transaction it left open aborted, its
    abort marker written, before the answer comes (the coordinator answers CONCURRENT_TRANSACTIONS
    until then, and is asked again). `topic[partition]` names what the fence is for in errors."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            address = _coordinator(cluster, transactional_id, topic, partition)
            with leaders.connection(cluster, address) as conn:
                code, _producer_id, _epoch = init_producer_id(conn, transactional_id)
            if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                raise MissingAcls.transactional_id(transactional_id, topic, partition)
            _check(code, "fencing an earlier copier", topic, partition)
            return
        except (_Retry, OSError) as exc:
            if time.monotonic() > deadline:
                raise CopyInterrupted(f"{topic}[{partition}]: fencing an earlier copier on the target did not "
                                      f"succeed in {timeout_s:.0f} s (last: {exc})", topic=topic,
                                      partition=partition) from exc
            time.sleep(0.05)


def lone_marker(cluster: ClusterConfig, topic: str, partition: int, transactional_id: str, commit: bool = False,
                timeout_s: float = 60.0, end: bool = True) -> None:
    """Append one marker, and nothing else, at the end of `topic[partition]`: a transaction of
    `transactional_id` registers the partition and is aborted, or committed. Returns once the
    coordinator has accepted the end; the marker lands shortly after (the caller waits for the end
    offset). Cut off before its end (`end` False: as a copier that died there), the transaction is
    aborted by the next fence of that id."""
    deadline = time.monotonic() + timeout_s
    name = wire._string(transactional_id)
    while True:
        try:
            address = _coordinator(cluster, transactional_id, topic, partition)
            with leaders.connection(cluster, address) as conn:
                code, producer_id, epoch = init_producer_id(conn, transactional_id)
                if code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
                    raise MissingAcls.transactional_id(transactional_id, topic, partition)
                _check(code, "starting a transaction for a lone marker", topic, partition)
                conn.send(ADD_PARTITIONS_TO_TXN, 1, name + struct.pack(">qhi", producer_id, epoch, 1)
                          + wire._string(topic) + struct.pack(">ii", 1, partition))
                _, data = conn.receive()
                (name_len,) = struct.unpack_from(">h", data, 8)
                (_index, code) = struct.unpack_from(">ih", data, 10 + name_len + 4)
                _check(code, "adding the partition to a transaction", topic, partition)
                if not end:
                    return
                conn.send(END_TXN, 1, name + struct.pack(">qhb", producer_id, epoch, int(commit)))
                _, data = conn.receive()
                _check(struct.unpack_from(">ih", data, 0)[1], "ending the lone marker's transaction", topic, partition)
                return
        except (_Retry, OSError) as exc:  # a pooled connection that raised is closed, not reused
            if time.monotonic() > deadline:
                raise CopyInterrupted(f"{topic}[{partition}]: writing a lone marker on the target did not "
                                      f"succeed in {timeout_s:.0f} s (last: {exc})", topic=topic,
                                      partition=partition) from exc
            time.sleep(0.1)


# ---------------------------------------------------------------- DescribeProducers v0 (flexible)

@dataclasses.dataclass(frozen=True)
class OpenTransaction:
    """A producer with a transaction open on a partition, and the offset where that transaction begins."""

    producer_id: int
    producer_epoch: int
    first_offset: int
    last_timestamp: int


def _compact_string(text: str) -> bytes:
    data = text.encode()
    return uvarint(len(data) + 1) + data


def _skip_tags(data: memoryview, pos: int) -> int:
    count, pos = uvarint_at(data, pos)
    for _ in range(count):
        _tag, pos = uvarint_at(data, pos)
        size, pos = uvarint_at(data, pos)
        pos += size
    return pos


def open_transactions(cluster: ClusterConfig, partitions: Iterable[tuple[str, int]]
                      ) -> Mapping[tuple[str, int], list[OpenTransaction]]:
    """{(topic, partition): the transactions open on it now}, asked of each partition's leader.
    A partition whose leader does not answer DescribeProducers (older than Kafka 2.8, or a request
    refused) is left out: the caller names the transaction by its offset alone."""
    wanted = list(partitions)
    out: dict[tuple[str, int], list[OpenTransaction]] = {}
    try:
        places = leaders.look_up(cluster, wanted)
    except Exception:  # noqa: BLE001 - naming the producer is a courtesy; the error stands without it
        return out
    by_leader: dict[tuple[str, int], dict[str, list[int]]] = {}
    for (topic, partition), address in places.items():
        by_leader.setdefault(address, {}).setdefault(topic, []).append(partition)
    for address, topics in by_leader.items():
        body = [b"\x00", uvarint(len(topics) + 1)]  # the request header's tagged fields, then the topics
        for topic, numbers in topics.items():
            body += [_compact_string(topic), uvarint(len(numbers) + 1), struct.pack(f">{len(numbers)}i", *numbers),
                     b"\x00"]
        body.append(b"\x00")
        try:
            with leaders.connection(cluster, address) as conn:
                conn.send(DESCRIBE_PRODUCERS, 0, b"".join(body))
                _, data = conn.receive()
        except OSError:
            continue
        pos = _skip_tags(data, 0) + 4  # response header tags, throttle
        topic_count, pos = uvarint_at(data, pos)
        for _ in range(topic_count - 1):
            topic, pos = _read_compact(data, pos)
            partition_count, pos = uvarint_at(data, pos)
            for _ in range(partition_count - 1):
                partition, code = struct.unpack_from(">ih", data, pos)
                pos += 6
                size, pos = uvarint_at(data, pos)
                pos += max(size - 1, 0)
                producers, pos = uvarint_at(data, pos)
                found = []
                for _ in range(producers - 1):
                    pid, epoch, _seq, last_ts, _coord, txn_start = struct.unpack_from(">qiiqiq", data, pos)
                    pos = _skip_tags(data, pos + 36)
                    if txn_start >= 0:
                        found.append(OpenTransaction(pid, epoch, txn_start, last_ts))
                pos = _skip_tags(data, pos)
                if not code:
                    out[(topic, partition)] = sorted(found, key=lambda t: t.first_offset)
            pos = _skip_tags(data, pos)
    return out


def coordinator_states(cluster: ClusterConfig, producer_ids: Iterable[int]) -> dict[int, tuple[str, str]]:
    """{producer id: (transactional id, state)} as the transaction coordinators hold them, asked of
    every broker. A producer id no coordinator lists is left out, and so are those of a broker that
    does not answer (older than Kafka 3.0, or not reachable): the caller takes them as unknown."""
    wanted = sorted(set(producer_ids))
    out: dict[int, tuple[str, str]] = {}
    if not wanted:
        return out
    try:
        with shared_admin(cluster) as admin:
            brokers = admin.client.list_topics(timeout=admin.timeout_s).brokers.values()
    except Exception:  # noqa: BLE001 - unknown, like a broker that does not answer
        return out
    # the header's tagged fields; no state filter; the producer ids; the body's tagged fields
    body = b"\x00" + uvarint(1) + uvarint(len(wanted) + 1) + struct.pack(f">{len(wanted)}q", *wanted) + b"\x00"
    for broker in brokers:
        try:
            with leaders.connection(cluster, (broker.host, broker.port)) as conn:
                conn.send(LIST_TRANSACTIONS, 0, body)
                _, data = conn.receive()
            out.update(_listed(data, wanted))
        except (OSError, KmigrateError, struct.error, IndexError):  # this broker's producers stay unknown
            continue
    return out


def _listed(data: memoryview, wanted: list[int]) -> dict[int, tuple[str, str]]:
    """{producer id: (transactional id, state)} of a ListTransactions v0 answer, for `wanted` ones."""
    out: dict[int, tuple[str, str]] = {}
    pos = _skip_tags(data, 0)
    _throttle, code = struct.unpack_from(">ih", data, pos)
    pos += 6
    unknown, pos = uvarint_at(data, pos)
    for _ in range(unknown - 1):
        _state, pos = _read_compact(data, pos)
    count, pos = uvarint_at(data, pos)
    for _ in range(count - 1):
        transactional_id, pos = _read_compact(data, pos)
        (producer_id,) = struct.unpack_from(">q", data, pos)
        state, pos = _read_compact(data, pos + 8)
        pos = _skip_tags(data, pos)
        if not code and producer_id in wanted:
            out[producer_id] = (transactional_id, state)
    return out


def _read_compact(data: memoryview, pos: int) -> tuple[str, int]:
    size, pos = uvarint_at(data, pos)
    return bytes(data[pos: pos + size - 1]).decode(errors="replace"), pos + max(size - 1, 0)


def hanging(cluster: ClusterConfig, stable_at: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], str]:
    """The partitions of {(topic, partition): last stable offset} held by a hanging transaction
    (open there, its producer's transactions ended at its coordinator), each with a phrase naming it
    and the way to end it. A transaction whose coordinator is not known to have ended it is not
    named: the coordinator may still write its markers."""
    return _hanging(cluster, stable_at, open_transactions(cluster, stable_at))


def _hanging(cluster: ClusterConfig, stable_at: Mapping[tuple[str, int], int],
             producers: Mapping[tuple[str, int], list[OpenTransaction]]) -> dict[tuple[str, int], str]:
    holding = {key: txn for key, stable in stable_at.items() for txn in producers.get(key, []) if txn.first_offset == stable}
    states = coordinator_states(cluster, {txn.producer_id for txn in holding.values()})
    out = {}
    for (topic, partition), txn in holding.items():
        transactional_id, state = states.get(txn.producer_id, ("", ""))
        if state in ENDED:
            out[(topic, partition)] = (
                f"a hanging transaction open since offset {txn.first_offset} by producer id {txn.producer_id} (epoch "
                f"{txn.producer_epoch}), whose coordinator holds {transactional_id!r} as {state}: no marker will end it; "
                f"`kafka-transactions.sh --bootstrap-server {cluster.bootstrap_servers} abort --topic {topic} "
                f"--partition {partition} --start-offset {txn.first_offset}` does")
    return out


def describe_open(cluster: ClusterConfig, topic: str, partition: int, stable_offset: int) -> str:
    """A phrase naming the transaction that holds `topic[partition]`'s last stable offset at
    `stable_offset`: its first offset and, where the broker tells, its producer id and epoch."""
    return describe_all_open(cluster, {(topic, partition): stable_offset})[(topic, partition)]


def describe_all_open(cluster: ClusterConfig, stable_at: Mapping[tuple[str, int], int]) -> dict[tuple[str, int], str]:
    """`describe_open` of many partitions ({(topic, partition): last stable offset}), their producers
    asked in one DescribeProducers a leader."""
    producers = open_transactions(cluster, stable_at)
    out = _hanging(cluster, stable_at, producers)
    for key, stable in stable_at.items():
        if key in out:
            continue
        found = [t for t in producers.get(key, []) if t.first_offset == stable]
        if not found:
            out[key] = f"a transaction open since offset {stable}"
            continue
        txn = found[0]
        since = time.strftime("%H:%M:%S UTC", time.gmtime(txn.last_timestamp / 1000)) if txn.last_timestamp > 0 else "?"
        out[key] = (f"a transaction open since offset {stable} by producer id {txn.producer_id} (epoch "
                    f"{txn.producer_epoch}, last write {since})")
    return out
