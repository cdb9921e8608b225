"""Small real-Kafka helpers for tests: create a topic, produce, read a partition back."""
from __future__ import annotations

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
from confluent_kafka.admin import AdminClient, NewTopic
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin


def create_topic(cluster: ClusterConfig, topic: str, partitions: int = 1, config: dict[str, str] | None = None,
                 replicas: int = 1) -> None:
    admin = AdminClient(cluster.admin())
    futures = admin.create_topics([NewTopic(topic, partitions, replicas, config=config or {})], operation_timeout=30)
    for future in futures.values():
        future.result(timeout=30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # metadata reaches the broker's cache shortly after creation
        meta = admin.list_topics(topic, timeout=10)
        if topic in meta.topics and meta.topics[topic].error is None and len(meta.topics[topic].partitions) == partitions:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not visible in metadata after 30s")


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
