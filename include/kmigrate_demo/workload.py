"""A mixed workload on the source cluster, as a migration meets it: a plain topic, a compacted one
with overwritten and deleted keys, a transactional one with committed and aborted transactions
whose log starts sit on a commit marker and on an abort marker (as Kafka Streams leaves its
repartition topics), one whose log start is above 0, one with LogAppendTime timestamps, two
consumer groups at different positions (one with offset metadata, as Kafka Streams commits its
stream time), a FileStreamSource connector and a FileStreamSink connector. Used by `make demo` and
the DAG tests."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from kmigrate.config import ClusterConfig
from kmigrate.errors import KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.run.connectors import old_connect

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


@dataclasses.dataclass
class Workload:
    prefix: str
    workdir: Path
    topics: dict[str, int]                      # topic -> partitions
    groups: dict[str, dict[str, dict[int, int]]]  # group -> topic -> partition -> committed offset
    group_metadata: dict[str, str]               # group -> the metadata of each of its commits
    source_connector: str
    sink_connector: str
    source_file: Path
    sink_file_source: Path
    sink_file_target: Path

    @property
    def topic_pattern(self) -> str:
        return rf"{self.prefix}\..*"

    @property
    def group_pattern(self) -> str:
        return rf"{self.prefix}\..*"

    def topic(self, name: str) -> str:
        return f"{self.prefix}.{name}"


def _wait(condition: Any, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise KmigrateError(f"workload: timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.2)


def _produce(producer: Producer, topic: str, partition: int, records: list[tuple[bytes | None, bytes | None]]) -> None:
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition)
        producer.poll(0)


def seed_mixed(source: ClusterConfig, source_connect: ConnectClient, prefix: str, workdir: Path,
               records: int = 600, connectors: str | None = None) -> Workload:
    """Create and fill the workload's topics, commit the groups, start the connectors (named
    `<connectors>-file-source` and `-file-sink`; by default `connectors` is `prefix`); returns once
    the connectors have caught up."""
    workdir.mkdir(parents=True, exist_ok=True)
    named = connectors or prefix
    w = Workload(prefix, workdir, {}, {}, {}, f"{named}-file-source", f"{named}-file-sink",
                 workdir / "input.txt", workdir / "sink-on-source.txt", workdir / "sink-on-target.txt")
    orders, customers, payments, audit, lines, clicks = (
        w.topic(n) for n in ("orders", "customers", "payments", "audit", "lines", "clicks"))
    w.topics = {orders: 3, customers: 1, payments: 2, audit: 2, lines: 1, clicks: 1}
    with ClusterAdmin(source) as admin:
        admin.create_topic(orders, 3, {})
        admin.create_topic(customers, 1, {"cleanup.policy": "compact"})
        admin.create_topic(payments, 2, {})
        admin.create_topic(audit, 2, {})
        admin.create_topic(lines, 1, {})
        admin.create_topic(clicks, 1, {"message.timestamp.type": "LogAppendTime"})

    producer = Producer(source.producer(**{"enable.idempotence": True, "linger.ms": 5}))
    for p in range(3):
        _produce(producer, orders, p, [(f"order-{p}-{i}".encode(), f"order {p}-{i}".encode()) for i in range(records)])
    for round_ in range(10):  # overwritten keys, and tombstones for every 7th key in odd rounds
        _produce(producer, customers, 0, [(f"customer-{k}".encode(),
                                           None if k % 7 == 0 and round_ % 2 else f"v{round_}-{k}".encode())
                                          for k in range(20)])
    for p in range(2):
        _produce(producer, audit, p, [(f"audit-{p}-{i}".encode(), f"event {p}-{i}".encode()) for i in range(records)])
    _produce(producer, clicks, 0, [(f"click-{i}".encode(), b"click") for i in range(records)])
    if producer.flush(60):
        raise KafkaException("workload: records left undelivered")

    txn = Producer(source.producer(**{"transactional.id": f"{prefix}-seed"}))
    txn.init_transactions(30)
    for round_ in range(6):
        for p in range(2):
            _produce(producer, payments, p, [(b"plain-%d-%d" % (p, round_), b"plain payment")])
        producer.flush(30)
        txn.begin_transaction()
        for p in range(2):
            _produce(txn, payments, p, [(b"txn-%d-%d-%d" % (p, round_, i), b"payment") for i in range(5)])
        if round_ % 3 == 1:
            txn.flush(30)  # sent, so that the abort leaves aborted records behind (unsent ones are purged)
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)

    with ClusterAdmin(source) as admin:
        for p in range(2):  # log start above 0: the oldest 40% deleted
            admin.delete_records(audit, p, records * 2 // 5)
        # Each round took 7 offsets of each payments partition: a plain record, 5 in a transaction,
        # its marker. Purged up to a marker followed by a plain record: round 2's commit marker
        # (offset 20) in partition 0, round 1's abort marker (offset 13) in partition 1.
        admin.delete_records(payments, 0, 20)
        admin.delete_records(payments, 1, 13)

    w.groups = {
        f"{prefix}.billing": {orders: {0: records // 2, 1: records // 3, 2: records}},
        f"{prefix}.analytics": {orders: {0: records - 10, 1: 0, 2: records // 4}, audit: {0: records // 2, 1: records}},
    }
    w.group_metadata = {f"{prefix}.billing": '{"streamTime": 1767225600000}', f"{prefix}.analytics": ""}
    for group, topics in w.groups.items():
        consumer = Consumer(source.consumer(group))
        try:
            consumer.commit(offsets=[TopicPartition(t, p, o, metadata=w.group_metadata[group])
                                     for t, positions in topics.items() for p, o in positions.items()],
                            asynchronous=False)
        finally:
            consumer.close()

    w.source_file.write_text("".join(f"line {i:04d}\n" for i in range(100)))
    source_connect.create(w.source_connector, {"connector.class": FILE_SOURCE, "tasks.max": "1",
                                               "file": str(w.source_file), "topic": lines})
    source_connect.create(w.sink_connector, {"connector.class": FILE_SINK, "tasks.max": "1",
                                             "file": str(w.sink_file_source), "topics": orders})
    with ClusterAdmin(source) as admin:
        _wait(lambda: admin.watermarks(lines, 0)[1] == 100, "the file source connector to read 100 lines")
    _wait(lambda: w.sink_file_source.exists() and len(w.sink_file_source.read_text().splitlines()) == 3 * records,
          "the file sink connector to write every order")
    sink = {w.sink_connector: source_connect.info(w.sink_connector)}

    def sink_committed() -> int:  # through the REST API, or the connector's group on a worker before 3.5
        with ClusterAdmin(source) as admin:
            offsets = old_connect.connector_offsets(source_connect, sink, admin)[w.sink_connector][0]
        return sum(o["offset"]["kafka_offset"] for o in offsets)

    _wait(lambda: sink_committed() == 3 * records, "the file sink connector to commit its offsets")
    return w
