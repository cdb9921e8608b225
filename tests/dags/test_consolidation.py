"""A consolidation (issue 67): the kafka_migration DAG moves a mixed workload (a plain topic, a
compacted one, transactions with aborts and log starts above zero, a topic whose timestamps are the
broker's, two consumer groups, a file source and a file sink connector) under new names on the
target: a topic prefix, a map entry that wins over it for one topic, and a group prefix. Every
partition is equal record by record at its source offsets under its new name, each group's offsets
sit in its renamed group on the renamed topics, its consumers continue at the next record, the
connectors continue on the target at their offsets writing and reading the renamed topics, the
configs are the source's, the source's names are not created on the target, the report names both,
and a re-run is a no-op."""
from __future__ import annotations

import uuid

import pytest
import requests
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.report.markdown import render, summarize
from kmigrate_demo.workload import seed_mixed

from tests.support.airflow import run_dag, task_states
from tests.support.connect import delete_connectors
from tests.support.kafka import records_of
from tests.support.migration import assert_workload_continues_on_target, partition_watermarks
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
    # a key of the sink's that the project does not know, naming a renamed topic: rewritten as the run names it
    sink_config = {**stack.source_connect.config(w.sink_connector), "audit.topics": f"{orders},elsewhere"}
    requests.put(f"{stack.source_connect.url}/connectors/{w.sink_connector}/config", json=sink_config,
                 timeout=30).raise_for_status()
    wait_until(lambda: stack.source_connect.config(w.sink_connector).get("audit.topics"), "the sink's new config", 30)
    conf = {"topics_include": w.topic_pattern, "groups": w.group_pattern, "acls": "off",
            "connectors": [w.source_connector, w.sink_connector],
            "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
            "connector_topic_keys": {w.sink_connector: ["audit.topics"]},
            "topic_prefix": "a.", "topic_renames": {orders: renamed_orders}, "group_prefix": "a.",
            "pre_copy": True,  # the live rounds copy and verify under the new names too
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

    sink = stack.target_connect.config(w.sink_connector)
    assert sink["topics"] == renamed_orders and sink["file"] == str(w.sink_file_target)
    assert sink["audit.topics"] == f"{renamed_orders},elsewhere"
    assert stack.target_connect.config(w.source_connector)["topic"] == names[w.topic("lines")]

    summary = summarize(Manifest(str(state), "consolidated"))
    assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
    assert summary["groups"] == summary["groups_exact"] == 2
    assert summary["connectors"] == summary["connectors_resumed"] == 2
    assert summary["renamed_topics"] == names and summary["renamed_groups"] == group_names
    billing = f"{w.prefix}.billing"
    report = render(summary)
    assert f"| {orders} → {renamed_orders} |" in report and f"| consumer group | {billing} | a.{billing} |" in report

    again = run_dag(dagbag, **conf)  # the same run again: nothing more to do
    assert str(again.state) == "success", task_states(again)
    assert partition_watermarks(stack.source, w.topics) == source_before
    # the groups' consumers, the file source and the file sink go on on the target under the new names
    assert_workload_continues_on_target(stack, w, names, group_names)

