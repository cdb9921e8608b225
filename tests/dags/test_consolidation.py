"""A consolidation (issue 67): the kafka_migration DAG moves a mixed workload (a plain topic, a
compacted one, transactions with aborts and log starts above zero, a topic whose timestamps are the
broker's, two consumer groups) under new names on the target: a topic prefix, a map entry that wins
over it for one topic, and a group prefix. Every partition is equal record by record at its source
offsets under its new name, each group's offsets sit in its renamed group on the renamed topics, a
consumer of a renamed group continues at the next record, the configs are the source's, the
source's names are not created on the target, the report names both, and a re-run is a no-op."""
from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.report.markdown import render, summarize
from kmigrate_demo.workload import seed_mixed

from tests.support.airflow import run_dag, task_states
from tests.support.connect import delete_connectors
from tests.support.kafka import records_of
from tests.support.migration import partition_watermarks
from tests.support.waiting import wait_until


@pytest.fixture
def workload(stack, tmp_path):
    prefix = f"dagcons{uuid.uuid4().hex[:6]}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=200)
    yield w
    delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))


def test_a_workload_moved_under_new_names_keeps_every_offset_and_its_groups_continue(stack, dagbag, workload, tmp_path):
    w = workload
    state = tmp_path / "state"
    orders = w.topic("orders")
    renamed_orders = f"east.{w.prefix}.orders-v2"
    names = {t: renamed_orders if t == orders else f"a.{t}" for t in w.topics}
    group_names = {g: f"a.{g}" for g in w.groups}
    conf = {"topics_include": w.topic_pattern, "groups": w.group_pattern, "connectors": [], "acls": "off",
            "topic_prefix": "a.", "topic_renames": {orders: renamed_orders}, "group_prefix": "a.",
            "quiesce_seconds": 2, "state_location": str(state), "run_name": "consolidated"}
    source_before = partition_watermarks(stack.source, w.topics)

    run = run_dag(dagbag, **conf)
    assert str(run.state) == "success", task_states(run)

    assert partition_watermarks(stack.source, w.topics) == source_before  # the source was never written to
    with ClusterAdmin(stack.target) as target, ClusterAdmin(stack.source) as source:
        on_target = set(target.list_topics())
        assert not on_target & set(w.topics), "a source name was created on the target"
        for (topic, partition), marks in source_before.items():
            assert target.watermarks(names[topic], partition) == marks, (topic, partition)
            assert records_of(stack.target, names[topic], partition) == records_of(stack.source, topic, partition)
        for topic in w.topics:
            assert target.topic_configs(names[topic]) == source.topic_configs(topic), topic
        for group, topics in w.groups.items():
            assert not target.committed(group), f"{group} set on the target under its source name"
            on_source = source.committed(group)
            assert {(t, p): c.offset for (t, p), c in on_source.items()} == {
                (t, p): o for t, positions in topics.items() for p, o in positions.items()}
            assert target.committed(group_names[group]) == {(names[t], p): c for (t, p), c in on_source.items()}, group

    billing = f"{w.prefix}.billing"  # its consumer continues on the renamed topic at the next record
    positions = w.groups[billing][orders]
    expected = sorted((p, k, v) for p, start in positions.items()
                      for _, k, v, *_ in records_of(stack.source, orders, p, start))
    assert sorted(_consumed(stack.target, group_names[billing], renamed_orders, len(expected))) == expected

    summary = summarize(Manifest(str(state), "consolidated"))
    assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
    assert summary["groups"] == summary["groups_exact"] == 2
    assert summary["renamed_topics"] == names and summary["renamed_groups"] == group_names
    report = render(summary)
    assert f"| {orders} → {renamed_orders} |" in report and f"| consumer group | {billing} | a.{billing} |" in report

    again = run_dag(dagbag, **conf)  # the same run again: nothing more to do
    assert str(again.state) == "success", task_states(again)
    assert partition_watermarks(stack.source, w.topics) == source_before


def _consumed(cluster, group: str, topic: str, count: int) -> list[tuple]:
    """(partition, key, value) of the first `count` records a consumer of `group` reads on `topic`
    from its committed positions."""
    consumer = Consumer(cluster.consumer(group, **{"auto.offset.reset": "error", "enable.auto.commit": False}))
    consumer.subscribe([topic])
    got: list[tuple] = []
    try:
        def read() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append((msg.partition(), msg.key(), msg.value()))
            elif msg is not None:
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            return len(got) >= count
        wait_until(read, f"{count} records of {topic} for {group}", 60, poll_s=0)
    finally:
        consumer.close()
    return got
