"""The fault tests' 3-broker stack (each cluster three KRaft nodes, broker and controller in one
process; topics with replication factor 3 and min.insync.replicas 2) and what the tests do on it:
kill and restart brokers, move replicas, seed the workloads the faults land in, and compare a topic
record by record on both clusters, recording each fault's result for `make test-faults`' last line
(tests/faults/summary.py). The fixtures that start it are in tests/faults/conftest.py."""
from __future__ import annotations

import dataclasses
import os
import signal
import struct
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import AdminClient
from kmigrate.config import ClusterConfig
from kmigrate.kafka import wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.varint import uvarint
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support import results
from tests.support.kafka import create_topic, records_of, seed_plain
from tests.support.waiting import wait_until

BROKERS = 3
RESULTS_ENV = "KMIGRATE_FAULT_RESULTS"
# what a wait on a cluster in the middle of a fault counts as "not yet": it answers with errors for a while
MID_FAULT: tuple[type[BaseException], ...] = (Exception,)


@dataclasses.dataclass
class MultiStack:
    module: Any
    clusters: tuple[Any, Any]
    state_dir: Path
    source: ClusterConfig
    target: ClusterConfig
    killed: list[Any] = dataclasses.field(default_factory=list)

    def config(self, role: str) -> ClusterConfig:
        return self.source if role == "source" else self.target

    def broker(self, role: str, node: int) -> Any:
        cluster = self.clusters[0 if role == "source" else 1]
        return next(s for s in self.module.services(self.clusters, self.state_dir)
                    if s.kind == "kafka" and s.cluster == cluster and s.node == node)

    def leader(self, role: str, topic: str, partition: int) -> int:
        admin = AdminClient(self.config(role).admin())
        described = admin.describe_topics(TopicCollection([topic]), request_timeout=30)[topic].result(timeout=30)
        return next(p.leader.id for p in described.partitions if p.id == partition)

    def placement(self, role: str, topic: str, partition: int, timeout_s: float = 30.0) -> tuple[list[int], int]:
        """(replicas, leader) of the partition, once the broker answering knows it with a leader: a
        topic just created (or a broker just restarted) may answer from older metadata for a moment."""
        admin = AdminClient(self.config(role).admin())
        found: dict = {}

        def known() -> bool:
            described = admin.describe_topics(TopicCollection([topic]), request_timeout=10)[topic].result(timeout=10)
            for p in described.partitions:
                if p.id == partition and p.leader is not None and p.leader.id >= 0:
                    found.update(replicas=[r.id for r in p.replicas], leader=p.leader.id)
                    return True
            return False

        wait_until(known, f"{role} {topic}[{partition}]: its replicas and a leader", timeout_s, ignore=MID_FAULT)
        return found["replicas"], found["leader"]

    def kill(self, role: str, node: int) -> None:
        """SIGKILL one broker (no shutdown, no leadership handed over)."""
        service = self.broker(role, node)
        pid = service.pid()
        assert pid is not None, f"{service.name} is not running"
        os.killpg(pid, signal.SIGKILL)
        self.killed.append(service)

    def restart_killed(self) -> None:
        if self.killed:
            self.module.up(self.clusters, self.state_dir, timeout_s=180)
            self.killed.clear()
        for config in (self.source, self.target):
            wait_until(lambda c=config: len(AdminClient(c.admin()).list_topics(timeout=10).brokers) == BROKERS,
                       f"{config.name}: {BROKERS} brokers registered", 60, ignore=MID_FAULT)

    def create_topic(self, topic: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
        create_topic(self.source, topic, partitions, config, replicas=BROKERS)
        wait_until(lambda: all(self.leader("source", topic, p) >= 0 for p in range(partitions)),
                   f"{topic}: leaders elected", 30, ignore=MID_FAULT)


def prepared(stack: MultiStack, topic: str) -> int:
    """The target topic created like the source's; the source partition 0's end."""
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, topic)
        return source.watermarks(topic, 0)[1]


def reassign(cluster: ClusterConfig, topic: str, partition: int, replicas: list[int]) -> None:
    """Start moving the partition's replicas to `replicas` (AlterPartitionReassignments v0, over the
    project's raw connection: the stack installs no Kafka command-line tools). The cluster moves them
    in the background; the call returns once the controller accepted the plan."""
    name = topic.encode()
    body = (b"\x00"  # the request header's tagged fields (a flexible request)
            + struct.pack(">i", 30_000) + uvarint(2) + uvarint(len(name) + 1) + name
            + uvarint(2) + struct.pack(">i", partition) + uvarint(len(replicas) + 1)
            + b"".join(struct.pack(">i", r) for r in replicas) + b"\x00" + b"\x00" + b"\x00")
    host, port = cluster.bootstrap_servers.split(",")[0].split(":")
    with wire.BrokerConnection(host, int(port)) as conn:
        conn.send(45, 0, body)  # ALTER_PARTITION_REASSIGNMENTS
        _, data = conn.receive()
    # response: header tagged fields, throttle, error code, message, [topic [partition, error code, ...]]
    at = 1 + 4
    (error,) = struct.unpack_from(">h", data, at)
    assert error == 0, f"AlterPartitionReassignments refused: error {wire.error_name(error)}"
    at += 2
    length = data[at] - 1  # a short error message (or null): one-byte length
    at += 1 + max(length, 0)
    at += 1  # responses: one topic
    at += 1 + data[at] - 1  # topic name
    at += 1  # partitions: one
    (_, partition_error) = struct.unpack_from(">ih", data, at)
    assert partition_error == 0, f"reassignment of {topic}[{partition}] refused: {wire.error_name(partition_error)}"


def compare(stack: MultiStack, topic: str, partitions: int, fault: str) -> int:
    """Record-by-record comparison of the topic on both clusters (log start and end, then offset, key,
    value, headers and timestamp of every read_committed-visible record); records the fault's result
    and asserts equality. Returns how many records were compared."""
    compared, mismatches = 0, 0
    for partition in range(partitions):
        with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
            marks = source.watermarks(topic, partition), target.watermarks(topic, partition)
        on_source = records_of(stack.source, topic, partition)
        on_target = records_of(stack.target, topic, partition)
        compared += len(on_source)
        mismatches += sum(a != b for a, b in zip(on_source, on_target)) + abs(len(on_source) - len(on_target))
        mismatches += marks[0] != marks[1]
    results.record(RESULTS_ENV, fault=fault, passed=mismatches == 0, records_compared=compared, mismatches=mismatches)
    assert mismatches == 0, f"{topic}: {mismatches} differences between source and target (watermarks {marks})"
    return compared


# The workloads the faults land in

RECORDS = 30_000
# the records' own timestamps: an hour ago onwards (older ones would fall to the topics' retention)
BASE_MS = int(time.time() * 1000) - 3_600_000
TRANSACTIONS = 100


def plain_workload(stack, topic: str) -> None:
    """RECORDS keyed records with headers and their own timestamps, in plain batches (whole-batch path)."""
    producer = Producer(stack.source.producer(**{"enable.idempotence": True, "linger.ms": 20, "acks": "all"}))
    for i in range(RECORDS):
        producer.produce(topic, key=f"k{i % 997}".encode(), value=(b"v%07d" % i) * 20, partition=0,
                         headers=[("n", str(i).encode())], timestamp=BASE_MS + i)
        if i % 5000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


def transactional_workload(stack, topic: str) -> None:
    """TRANSACTIONS of 50 records, every fifth aborted: markers and aborted runs all along (record path)."""
    producer = Producer(stack.source.producer(**{"transactional.id": f"fault-{uuid.uuid4().hex[:8]}",
                                                  "linger.ms": 5}))
    producer.init_transactions(30)
    for txn in range(TRANSACTIONS):
        producer.begin_transaction()
        for i in range(50):
            producer.produce(topic, key=b"t%d" % i, value=b"txn %d record %d" % (txn, i) * 8, partition=0,
                             timestamp=BASE_MS + txn * 50 + i)
        if txn % 5 == 4:
            producer.flush(30)  # written before the abort (librdkafka drops what it still holds)
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    producer.flush(30)


def seeded(stack, prefix: str, partitions: int, per_partition: int, **producer_settings) -> str:
    """A new topic `prefix`-<random> seeded with plain records (tests/support/kafka.py seed_plain), its leaders elected."""
    topic = f"{prefix}-{uuid.uuid4().hex[:6]}"
    seed_plain(stack.source, topic, partitions=partitions, per_partition=per_partition, **producer_settings)
    wait_until(lambda: all(stack.leader("source", topic, p) >= 0 for p in range(partitions)), f"{topic}: leaders", 30,
               ignore=MID_FAULT)
    return topic
