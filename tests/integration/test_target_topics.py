"""Target topics on the real clusters: the copy's settings are put back to the source's, and what
the source changed after the target topic was made is applied only to a topic the run created."""
from __future__ import annotations

import pytest
from kmigrate.errors import TopicMismatch
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.run.targets.prepare import COPY_SETTINGS, prepare_target_topic, reconcile_target_topic, restore_target_topic

from tests.support.kafka import create_topic
from tests.support.waiting import wait_until


def test_the_copy_settings_are_restored_to_the_source_values_and_a_second_restore_changes_nothing(stack, unique_name):
    create_topic(stack.source, unique_name, config={"message.timestamp.type": "LogAppendTime",
                                                    "message.timestamp.before.max.ms": "86400000"})
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        assert prepare_target_topic(source, target, unique_name).created
        assert {k: target.topic_configs(unique_name)[k] for k in COPY_SETTINGS} == COPY_SETTINGS
        restored = restore_target_topic(source, target, unique_name)
        assert restored == {"message.timestamp.type": ["CreateTime", "LogAppendTime"],
                            "message.timestamp.before.max.ms": [COPY_SETTINGS["message.timestamp.before.max.ms"],
                                                                "86400000"],
                            "message.timestamp.after.max.ms": [COPY_SETTINGS["message.timestamp.after.max.ms"],
                                                               "3600000"]}  # the source's (a broker default)
        assert restore_target_topic(source, target, unique_name) == {k: [v[1], v[1]] for k, v in restored.items()}
        assert target.topic_configs(unique_name) == source.topic_configs(unique_name)
        # a later copy into the topic sets them again; one with nothing to write leaves them alone
        prepare_target_topic(source, target, unique_name, writes=False)
        assert target.topic_configs(unique_name)["message.timestamp.type"] == "LogAppendTime"
        prepare_target_topic(source, target, unique_name, writes=True)
        assert target.topic_configs(unique_name)["message.timestamp.type"] == "CreateTime"


def test_source_changes_are_applied_to_a_topic_the_run_created_and_refused_on_another(stack, unique_name):
    create_topic(stack.source, unique_name, partitions=2)
    create_topic(stack.target, unique_name, partitions=2)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        source.add_partitions(unique_name, 3)
        source.alter_topic_configs(unique_name, {"retention.ms": "3600000"})
        # the broker applies a change once the controller's record reaches it: a describe right after may be older
        wait_until(lambda: source.topic_configs(unique_name)["retention.ms"] == "3600000"
                   and source.partition_count(unique_name) == 3, f"{unique_name}: the source's changes", 30)
        with pytest.raises(TopicMismatch, match=rf"'{unique_name}' changed.*partitions 2 -> 3.*did not create"):
            reconcile_target_topic(source, target, unique_name, created_by_run=False)
        assert target.partition_count(unique_name) == 2  # nothing changed
        assert target.topic_configs(unique_name)["retention.ms"] == "604800000"

        changed = reconcile_target_topic(source, target, unique_name, created_by_run=True)
        assert changed == {"partitions": [2, 3], "configs": {"retention.ms": ["604800000", "3600000"]}}
        assert target.partition_count(unique_name) == 3
        assert reconcile_target_topic(source, target, unique_name, created_by_run=False) == {
            "partitions": None, "configs": {}}  # now they agree


def test_a_change_waited_for_reads_back_its_values_and_the_overrides_it_removed(stack, unique_name):
    create_topic(stack.target, unique_name, config={"retention.ms": "3600000"})
    with ClusterAdmin(stack.target) as target:
        assert not target._shows(unique_name, {}, {"retention.ms"})  # the override is still there
        assert not target._shows(unique_name, {"segment.ms": "7200000"}, set())
        target.alter_topic_configs(unique_name, {"segment.ms": "7200000"}, delete=["retention.ms"], visible=True)
        assert target._shows(unique_name, {"segment.ms": "7200000"}, {"retention.ms"})
        own = target.topic_configs(unique_name, explicit_only=True)
        assert own.get("segment.ms") == "7200000" and "retention.ms" not in own
