"""A connector's config and offsets under a run's renames (kmigrate.run.connectors.renamed): the keys
known to name topics rewritten, a sink's pattern prefixed where one prefix renames all it matches,
and any other key naming a renamed topic refused by name unless the run's overrides set it."""
from __future__ import annotations

import re

import pytest
from kmigrate.errors import ConfigError
from kmigrate.run.connectors.renamed import renamed_config, renamed_offsets

FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
NAMES = {"orders": "a.orders", "payments": "a.payments", "lines": "a.lines", "kept": "kept"}


def test_a_sink_s_topics_and_the_file_source_s_topic_take_the_target_s_names():
    sink = {"connector.class": FILE_SINK, "topics": "orders, payments,elsewhere", "file": "/data/orders"}
    assert renamed_config("sink", "sink", sink, NAMES) == {**sink, "topics": "a.orders,a.payments,elsewhere"}
    source = {"connector.class": FILE_SOURCE, "topic": "lines", "file": "/data/in"}
    assert renamed_config("source", "source", source, NAMES) == {**source, "topic": "a.lines"}


def test_a_sink_s_pattern_is_prefixed_when_one_prefix_renames_all_it_matches():
    sink = {"connector.class": FILE_SINK, "topics.regex": "(orders|payments)"}
    out = renamed_config("sink", "sink", sink, NAMES)["topics.regex"]
    assert [t for t in NAMES.values() if re.fullmatch(out, t)] == ["a.orders", "a.payments"]
    assert renamed_config("sink", "sink", {"topics.regex": "kept"}, NAMES) == {"topics.regex": "kept"}
    with pytest.raises(ConfigError, match=r"connector 'sink': topics.regex \('\(orders\|payments\)'\) matches topics"):
        renamed_config("sink", "sink", sink, {**NAMES, "payments": "b.payments"})
    with pytest.raises(ConfigError, match="topics.regex"):
        renamed_config("sink", "sink", {"topics.regex": "orders|kept"}, NAMES)  # renamed and not: no one prefix


def test_another_key_naming_a_renamed_topic_is_refused_by_name_unless_named_or_overridden():
    sink = {"connector.class": FILE_SINK, "topics": "orders", "errors.deadletterqueue.topic.name": "payments",
            "transforms.route.replacement": "lines other", "audit.topics": "orders,kept"}
    with pytest.raises(ConfigError) as refused:
        renamed_config("sink", "sink", sink, NAMES)
    text = str(refused.value)
    assert "transforms.route.replacement names lines" in text and "audit.topics names orders" in text
    assert "errors.deadletterqueue" not in text  # Connect's own key of a sink's dead letter queue: known
    assert 'connector_topic_keys ({"sink": ["<key>"]})' in text and "connector_overrides" in text
    assert "Nothing was done" in text
    # named in connector_topic_keys: its list rewritten as a sink's topics are; overridden: as the override sets it
    out = renamed_config("sink", "sink", sink, NAMES, keys=("audit.topics",),
                         overridden={"transforms.route.replacement": "y"})
    assert out == {**sink, "topics": "a.orders", "errors.deadletterqueue.topic.name": "a.payments",
                   "audit.topics": "a.orders,kept"}
    out = renamed_config("sink", "sink", sink, NAMES, keys=("audit.topics", "transforms.route.replacement"),
                         overridden={"errors.deadletterqueue.topic.name": "x"})
    assert out["transforms.route.replacement"] == "a.lines,other" and out["errors.deadletterqueue.topic.name"] == "payments"
    # a topic's name inside another word is no reference to it
    assert renamed_config("s", "source", {"file": "/data/orders.txt", "x": "orders_archive"}, NAMES)["x"] == "orders_archive"


def test_nothing_changes_without_renames_and_a_sink_s_offsets_follow_its_topics():
    sink = {"connector.class": FILE_SINK, "topics": "orders", "other": "orders"}
    assert renamed_config("sink", "sink", sink, {"orders": "orders"}) == sink
    offsets = [{"partition": {"kafka_topic": "orders", "kafka_partition": 1}, "offset": {"kafka_offset": 7}},
               {"partition": {"kafka_topic": "elsewhere", "kafka_partition": 0}, "offset": {"kafka_offset": 2}}]
    assert renamed_offsets(offsets, NAMES) == [
        {"partition": {"kafka_topic": "a.orders", "kafka_partition": 1}, "offset": {"kafka_offset": 7}},
        {"partition": {"kafka_topic": "elsewhere", "kafka_partition": 0}, "offset": {"kafka_offset": 2}}]
