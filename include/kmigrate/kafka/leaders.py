"""Partition leaders: where the copier's raw requests go, and a pooled connection to them.

A task of many partitions looks the leaders of all of them up at once (`remember`: one
describe_topics a cluster) and each partition's copy then finds its leader there, for at most
REMEMBERED_S; a copy that a leader change interrupted looks it up again (`forget`), as does every
copy outside such a task."""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Iterator

from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from kmigrate.config import ClusterConfig
from kmigrate.errors import CopyInterrupted
from kmigrate.kafka.pool import Pool, identity, shared_admin
from kmigrate.kafka.transport import Transport
from kmigrate.kafka.wire import BrokerConnection

TopicPartition = tuple[str, int]
Address = tuple[str, int]
REMEMBERED_S = 10.0

connections: Pool[BrokerConnection] = Pool(BrokerConnection.close, usable=BrokerConnection.quiet)
_remembered: dict[tuple, tuple[float, Address]] = {}
_remembered_lock = threading.Lock()


def look_up(cluster: ClusterConfig, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
            ) -> dict[TopicPartition, Address]:
    """Each partition's leader address now, from one describe_topics for all their topics; a
    partition without a leader is left out."""
    wanted = set(partitions)
    topics = sorted({t for t, _ in wanted})
    if not topics:
        return {}
    with shared_admin(cluster) as admin:
        futures = admin.client.describe_topics(TopicCollection(topics), request_timeout=timeout_s)
        described = {t: f.result(timeout=timeout_s) for t, f in futures.items()}
    return {(topic, p.id): (p.leader.host, p.leader.port) for topic, info in described.items()
            for p in info.partitions if (topic, p.id) in wanted and p.leader is not None}


def remember(cluster: ClusterConfig, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
             ) -> dict[TopicPartition, Address]:
    """look_up, kept for `leader` and `leaders` for REMEMBERED_S."""
    found = look_up(cluster, partitions, timeout_s)
    key, now = identity(cluster), time.monotonic()
    with _remembered_lock:
        _remembered.update({(key, topic, partition): (now, address) for (topic, partition), address in found.items()})
    return found


def leaders(cluster: ClusterConfig, partitions: Iterable[TopicPartition], timeout_s: float = 30.0
            ) -> dict[TopicPartition, Address]:
    """Each partition's leader as remembered, the others looked up together and remembered; a
    partition without a leader is left out."""
    partitions = list(partitions)
    found = {tp: address for tp in partitions if (address := _remembered_leader(cluster, *tp)) is not None}
    missing = [tp for tp in partitions if tp not in found]
    return {**found, **remember(cluster, missing, timeout_s)} if missing else found


def forget(cluster: ClusterConfig, partitions: Iterable[TopicPartition]) -> None:
    key = identity(cluster)
    with _remembered_lock:
        for topic, partition in partitions:
            _remembered.pop((key, topic, partition), None)


def _remembered_leader(cluster: ClusterConfig, topic: str, partition: int) -> Address | None:
    with _remembered_lock:
        entry = _remembered.get((identity(cluster), topic, partition))
    if entry is None or time.monotonic() - entry[0] > REMEMBERED_S:
        return None
    return entry[1]


@contextlib.contextmanager
def connection(cluster: ClusterConfig, address: Address, client_id: str = "kmigrate", timeout_s: float = 60.0
               ) -> Iterator[BrokerConnection]:
    """A pooled connection to the broker at `address`, with the cluster's security settings, whose
    requests fail once an answer is `timeout_s` late. The timeout is set at each use, not a part of
    the pool's key: a reading's retries ask with what is left of its deadline, a new number each
    time, and each got a connection of its own, which waited 30 s in the pool (a mirror task over
    3,000 partitions held 2,000 sockets, and paid a TCP connection a read)."""
    host, port = address
    with connections.use((host, port, client_id, identity(cluster)),
                         lambda: BrokerConnection(host, port, timeout_s, client_id, Transport.of(cluster))) as conn:
        conn.set_timeout(timeout_s)
        yield conn


def leader(cluster: ClusterConfig, topic: str, partition: int, admin: AdminClient | None = None) -> tuple[str, int]:
    """The partition leader's address, from a metadata request of `admin` (the caller's client for
    the cluster: on a secured cluster each new client pays TLS handshakes and SASL rounds) or of a
    client made for it."""
    remembered = _remembered_leader(cluster, topic, partition)
    if remembered is not None:
        return remembered
    client = admin if admin is not None else cluster.client(AdminClient, cluster.admin())  # a client with nothing queued is falsy
    # describe_topics, not list_topics(topic): on a long-lived client that has not seen the topic,
    # librdkafka answers list_topics(topic) after its next metadata refresh (0-100 ms, 37 ms on average)
    # (a cluster electing a controller answers with a timeout for a while: the copy's retry takes it)
    described = client.describe_topics(TopicCollection([topic]), request_timeout=30)[topic].result(timeout=30)
    node = next((p.leader for p in described.partitions if p.id == partition), None)
    if node is None:
        raise CopyInterrupted(f"{topic}[{partition}] has no leader on {cluster.name} now; retry once the cluster has "
                              "elected one", topic=topic, partition=partition)
    return node.host, node.port


def settle(cluster: ClusterConfig, topic: str, partition: int, admin: AdminClient | None = None,
           timeout_s: float = 60.0) -> int:
    """Wait until the partition's leader holds nothing uncommitted (its log end offset is its high
    watermark). After a leader change the new leader may hold records that an interrupted write
    sent to the old one, which become visible once the other replicas have them: a copy that
    resumed from the high watermark before then would write its next records behind them. Returns
    the high watermark."""
    deadline = time.monotonic() + timeout_s
    while True:
        with connect_to_leader(cluster, topic, partition, admin=admin) as conn:
            log_end, high = conn.end_offsets(topic, partition)
        if log_end == high:
            return high
        if time.monotonic() > deadline:
            raise CopyInterrupted(f"{topic}[{partition}]: the target's leader still holds offsets {high}..{log_end - 1} "
                                  f"uncommitted after {timeout_s:.0f} s (too few in-sync replicas?)",
                                  topic=topic, partition=partition)
        time.sleep(0.05)


@contextlib.contextmanager
def connect_to_leader(cluster: ClusterConfig, topic: str, partition: int, client_id: str = "kmigrate",
                      admin: AdminClient | None = None) -> Iterator[BrokerConnection]:
    """A connection to the partition's leader, with the cluster's security settings, kept for
    reuse in this process (`pool`): a worker copying many partitions authenticates once per broker."""
    with connection(cluster, leader(cluster, topic, partition, admin), client_id) as conn:
        yield conn
