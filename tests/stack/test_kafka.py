"""The two local clusters accept writes and serve them back, and are independent of each other."""
from __future__ import annotations

from confluent_kafka.admin import AdminClient

from tests.support.kafka import create_topic, produce, read_partition, watermarks


def _roundtrip(cluster, topic: str) -> None:
    records = [(f"k{i}".encode(), f"value {i}".encode()) for i in range(100)] + [(b"null-value", None), (None, b"no key")]
    create_topic(cluster, topic)
    offsets = produce(cluster, topic, records)
    assert offsets == list(range(len(records)))
    assert watermarks(cluster, topic) == (0, len(records))
    assert read_partition(cluster, topic) == [(i, k, v) for i, (k, v) in enumerate(records)]


def test_source_cluster_produces_and_reads_back(stack, unique_name):
    _roundtrip(stack.source, unique_name)


def test_target_cluster_produces_and_reads_back(stack, unique_name):
    _roundtrip(stack.target, unique_name)


def test_clusters_are_independent(stack, unique_name):
    create_topic(stack.source, unique_name)
    source_admin, target_admin = AdminClient(stack.source.admin()), AdminClient(stack.target.admin())
    assert unique_name in source_admin.list_topics(timeout=10).topics
    assert unique_name not in target_admin.list_topics(timeout=10).topics
    source_id = source_admin.describe_cluster(request_timeout=10).result(timeout=10).cluster_id
    target_id = target_admin.describe_cluster(request_timeout=10).result(timeout=10).cluster_id
    assert source_id and target_id and source_id != target_id
