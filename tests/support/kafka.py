"""Small real-Kafka helpers: create a topic, produce, read a partition back (as offsets, keys and
values, or every read_committed-visible record with its headers and timestamp), watermarks, and
seeding a topic with plain records or with transactions, and a hanging transaction."""
from __future__ import annotations

import struct
import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from kmigrate.config import ClusterConfig
from kmigrate.kafka import leaders, multi, txn_wire, wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import read_range, timestamp_of
from kmigrate.kafka.varint import uvarint, uvarint_at

from tests.support.waiting import wait_until
from tests.support.wire import records_of as records_of_batch


def create_topic(cluster: ClusterConfig, topic: str, partitions: int = 1, config: dict[str, str] | None = None,
                 replicas: int = 1) -> None:
    admin = AdminClient(cluster.admin())
    futures = admin.create_topics([NewTopic(topic, partitions, replicas, config=config or {})], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)

    seen: list[str] = ["no metadata answer"]

    def visible() -> bool:
        meta = admin.list_topics(topic, timeout=10)
        found = meta.topics.get(topic)
        seen[0] = "absent" if found is None else f"error {found.error}, {len(found.partitions)} partitions"
        return found is not None and found.error is None and len(found.partitions) == partitions

    # metadata reaches the broker's cache shortly after creation (once in CI, on a loaded machine, not
    # within 30 s: what the broker last said is in the failure)
    try:
        wait_until(visible, f"topic {topic} in the metadata with {partitions} partitions", timeout_s=60, poll_s=0.1)
    except AssertionError as e:
        raise AssertionError(f"{e}; the broker's metadata last said: {seen[0]}") from None


def produce(cluster: ClusterConfig, topic: str, records: Iterable[tuple[bytes | None, bytes | None]],
            partition: int = 0) -> list[int]:
    """Produce (key, value) pairs to one partition; returns the offsets the broker assigned."""
    offsets: list[int] = []
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))
    for key, value in records:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=on_delivery)
        producer.poll(0)
    remaining = producer.flush(30)
    if errors or remaining:
        raise KafkaException(errors[0] if errors else f"{remaining} records not delivered")
    return offsets


def read_partition(cluster: ClusterConfig, topic: str, partition: int = 0, timeout_s: float = 30.0) -> list[tuple[int, bytes | None, bytes | None]]:
    """Every visible record of the partition from its log start to its current end, as (offset, key, value)."""
    consumer = Consumer(cluster.consumer())
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        out: list[tuple[int, bytes | None, bytes | None]] = []
        if high <= low:
            return out
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaException(msg.error())
            out.append((msg.offset(), msg.key(), msg.value()))
        raise AssertionError(f"{topic}[{partition}]: did not reach the end ({high}) within {timeout_s}s; read {len(out)}")
    finally:
        consumer.close()


def watermarks(cluster: ClusterConfig, topic: str, partition: int = 0) -> tuple[int, int]:
    consumer = Consumer(cluster.consumer())
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        consumer.close()


def all_watermarks(cluster, topic):
    with ClusterAdmin(cluster) as admin:
        return [admin.watermarks(topic, p) for p in range(admin.require_partition_count(topic))]


def records_of(cluster, topic, partition, start=0, end=None):
    """(offset, key, value, headers, timestamp) of every read_committed-visible record."""
    if end is None:
        with ClusterAdmin(cluster) as admin:
            start_, end = admin.watermarks(topic, partition)
            start = max(start, start_)
    return [(m.offset(), m.key(), m.value(), m.headers(), timestamp_of(m))
            for m in read_range(cluster, topic, partition, start, end)]


def seed_plain(cluster, topic, partitions, per_partition, **producer_settings):
    # distinct, recent timestamps: older than the broker's 7-day retention would be deleted by it
    first_timestamp = int(time.time() * 1000) - per_partition * 10
    create_topic(cluster, topic, partitions)
    producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 5, **producer_settings}))
    for p in range(partitions):
        for i in range(per_partition):
            key = None if i % 50 == 7 else f"key-{p}-{i}".encode()
            value = None if i % 50 == 13 else (f"value-{p}-{i}-" + "x" * (i % 200)).encode()
            headers = [("h", f"{i}".encode()), ("empty", b""), ("null", None)] if i % 3 == 0 else None
            producer.produce(topic, key=key, value=value, partition=p, headers=headers,
                             timestamp=first_timestamp + i * 10)
            producer.poll(0)
    assert producer.flush(30) == 0


class TxnSeeder:
    """Writes committed and aborted transactions and plain records to partition 0 of a source topic,
    keeping count of the offsets they take."""

    def __init__(self, cluster, topic: str) -> None:
        self.cluster, self.topic, self.end = cluster, topic, 0
        self.plain = Producer(cluster.producer(**{"enable.idempotence": True}))
        self.txn = Producer(cluster.producer(**{"transactional.id": f"{topic}-seed"}))
        self.txn.init_transactions(30)

    def records(self, n: int, tag: str) -> None:
        for i in range(n):
            self.plain.produce(self.topic, key=f"{tag}-{i}".encode(), value=b"plain", partition=0)
        self.plain.flush(30)
        self.end += n

    def open_transaction(self, n: int) -> None:
        """n records in a transaction left open (the caller commits or aborts `self.txn`'s)."""
        self.txn.begin_transaction()
        for i in range(n):
            self.txn.produce(self.topic, key=f"open-{i}".encode(), value=b"txn", partition=0)
        self.txn.flush(30)

    def transaction(self, n: int, tag: str, commit: bool) -> int:
        """Returns the offset of its marker."""
        self.txn.begin_transaction()
        for i in range(n):
            self.txn.produce(self.topic, key=f"{tag}-{i}".encode(), value=b"txn", partition=0)
        self.txn.flush(30)
        (self.txn.commit_transaction if commit else self.txn.abort_transaction)(30)
        self.end += n + 1
        with ClusterAdmin(self.cluster) as admin:  # the marker lands after commit/abort returns
            admin.wait_for_end(self.topic, 0, self.end)
        return self.end - 1


def commit_offsets(cluster, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """`group` commits `offsets` on `cluster` without joining (an EMPTY group, as after its consumers left)."""
    consumer = Consumer(cluster.consumer(group))
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def leave_hanging_transaction(cluster: ClusterConfig, topic: str, partition: int, transactional_id: str) -> int:
    """A transaction open on `topic[partition]` that its coordinator does not hold open (a hanging
    one, as a broker killed while a commit's markers were written leaves): `transactional_id` is
    started (its coordinator holds it Empty), and one transactional record of its producer id is
    written raw, with the leader's check of the partition against the coordinator switched off for
    that write (transaction.partition.verification.enable, per broker, set back after). Returns the
    offset it begins at."""
    address = leaders.look_up(cluster, [(topic, partition)])[(topic, partition)]
    admin = AdminClient(cluster.admin())
    [broker] = [b for b in admin.list_topics(timeout=30).brokers.values() if (b.host, b.port) == address]
    check = "transaction.partition.verification.enable"

    def verify(value: str | None) -> None:
        entry = (ConfigEntry(check, value, incremental_operation=AlterConfigOpType.SET) if value else
                 ConfigEntry(check, "", incremental_operation=AlterConfigOpType.DELETE))
        for future in admin.incremental_alter_configs([ConfigResource("BROKER", str(broker.id), incremental_configs=[entry])]).values():
            future.result(30)

    [offset] = produce(cluster, topic, [(b"hanging", b"a record of a transaction no coordinator holds open")], partition)
    with leaders.connection(cluster, address) as conn:  # that record's batch, whatever was written after it
        multi.send_fetch(conn, {(topic, partition): offset}, 1 << 20, 1 << 20, max_wait_ms=100)
        [batch] = [b for b in wire.parse_batches(multi.receive_fetch(conn)[(topic, partition)].records)
                   if b.base_offset == offset]
        code, coordinator = wire.find_coordinator(conn, transactional_id, wire.TRANSACTION_COORDINATOR)
    assert not code, wire.error_name(code)
    with leaders.connection(cluster, coordinator) as conn:
        code, producer_id, epoch = txn_wire.init_producer_id(conn, transactional_id)
    assert not code, wire.error_name(code)
    data = batch.for_produce()
    struct.pack_into(">h", data, 21, batch.attributes | 0x10)  # transactional
    data = wire.Idempotence(producer_id, epoch).stamp(data)
    verify("false")
    try:
        body = (wire._string(transactional_id) + struct.pack(">hii", -1, 30_000, 1) + wire._string(topic)
                + struct.pack(">iii", 1, partition, len(data)) + bytes(data))
        [start] = wait_until(lambda: _produced(cluster, address, body, topic, partition), "the raw transactional write", 30)
    finally:
        verify(None)
    return start


def _produced(cluster: ClusterConfig, address: tuple[str, int], body: bytes, topic: str, partition: int) -> list[int]:
    """One raw Produce of `body`: [the offset it was written at], or [] while the leader still checks
    the partition against the coordinator (the config change not applied yet: INVALID_PRODUCER_ID_MAPPING
    or INVALID_TXN_STATE)."""
    with leaders.connection(cluster, address) as conn:
        conn.send(wire.PRODUCE, wire.PRODUCE_VERSION, body)
        _, answers = multi.receive_produce(conn)
    code, offset = answers[(topic, partition)]
    assert code in (0, 48, 49), wire.error_name(code)
    return [offset] if code == 0 else []


WRITE_TXN_MARKERS = 27


def repeat_marker(cluster: ClusterConfig, topic: str, partition: int, offset: int) -> int:
    """Append the transaction marker at `offset` of `topic[partition]` again, as its coordinator does
    when it sends a marker a second time (it lost the leader's answer): WriteTxnMarkers v1 to the
    leader, with the marker's producer id, epoch, kind and coordinator epoch. Returns the offset it
    landed at (a cluster without an authorizer lets any client send it)."""
    address = leaders.look_up(cluster, [(topic, partition)])[(topic, partition)]
    with leaders.connection(cluster, address) as conn:
        multi.send_fetch(conn, {(topic, partition): offset}, 1 << 20, 1 << 20, max_wait_ms=0)
        [batch] = [b for b in wire.parse_batches(multi.receive_fetch(conn)[(topic, partition)].records)
                   if b.base_offset == offset]
        assert batch.control, f"{topic}[{partition}] holds no marker at {offset}"
        producer_id, epoch = struct.unpack_from(">qh", batch.data, 43)
        [(_, _, key, value, _)] = records_of_batch(batch)  # a control record: version and kind; version and epoch
        (kind,), (coordinator_epoch,) = struct.unpack_from(">h", key, 2), struct.unpack_from(">i", value, 2)
        name = topic.encode()
        body = (b"\x00" + uvarint(2) + struct.pack(">qhb", producer_id, epoch, kind)  # header tags; one marker
                + uvarint(2) + uvarint(len(name) + 1) + name + uvarint(2) + struct.pack(">i", partition) + b"\x00"
                + struct.pack(">i", coordinator_epoch) + b"\x00" + b"\x00")
        conn.send(WRITE_TXN_MARKERS, 1, body)
        _, data = conn.receive()
    pos = 1 + 1 + 8 + 1  # header tags, one marker, its producer id, one topic
    name_length, pos = uvarint_at(data, pos)
    pos += name_length - 1 + 1  # the name, one partition
    (_index, code) = struct.unpack_from(">ih", data, pos)
    assert not code, wire.error_name(code)
    with ClusterAdmin(cluster) as admin:
        _, end = admin.watermarks(topic, partition)
    return end - 1
