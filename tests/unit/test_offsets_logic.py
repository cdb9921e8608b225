"""Pure logic of the offsets half: selections, plans, offset translation for groups and sink
connectors, target connector configs."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConfigError
from kmigrate.offsets import OffsetTranslator
from kmigrate.run.connectors.migrate import target_config, translated_offsets
from kmigrate.run.copying.plan import plan_from_topics
from kmigrate.run.checks.selection import select


def test_select_fully_matches_include_minus_exclude_and_never_internal_topics():
    names = ["orders", "orders-dlq", "payments", "__consumer_offsets", "_connect-configs"]
    assert select(names, "orders.*") == ["orders", "orders-dlq"]
    assert select(names, "orders.*", "orders-dlq") == ["orders"]
    assert select(names, ".*", "_.*") == ["orders", "orders-dlq", "payments"]
    assert select(names, "order") == []  # a full match, not a search


def test_a_bad_pattern_names_itself():
    with pytest.raises(ConfigError, match=r"the consumer group include pattern '\[' is not a valid"):
        select(["a"], "[", what="consumer group")


def test_plan_units_are_largest_first_and_modes_are_checked():
    topics = {"a": {"partitions": [{"partition": 0, "log_start": 0, "end": 5},
                                   {"partition": 1, "log_start": 90, "end": 100}]},
              "b": {"partitions": [{"partition": 0, "log_start": 0, "end": 50}]}}
    plan = plan_from_topics(topics, {"b": "translate"})
    assert [(u["topic"], u["partition"], u["offsets"], u["mode"]) for u in plan["units"]] == [
        ("b", 0, 50, "translate"), ("a", 1, 10, "preserve"), ("a", 0, 5, "preserve")]
    with pytest.raises(ConfigError, match="'copy' is not 'preserve' or 'translate'"):
        plan_from_topics(topics, {"a": "copy"})


def translator() -> OffsetTranslator:
    # t[0] translated: source 10..19 -> target 100..109, source 25..29 -> 110..114 (20..24 were aborted)
    rows = {("t", 0): {"offset_map": [[10, 100, 10], [25, 110, 5]], "target_end": 115}}
    return OffsetTranslator({"t": "translate", "p": "preserve"}, rows)


def test_translation_maps_the_next_record_to_read():
    tr = translator()
    assert [tr.target_offset("t", 0, o) for o in (0, 10, 15, 20, 25, 29, 30, 99)] == [100, 100, 105, 110, 110, 114, 115, 115]
    assert tr.target_offset("p", 3, 12345) == 12345  # preserved: identity
    with pytest.raises(ConfigError, match=r"t\[1\] is copied in translate mode but has no copy result"):
        tr.target_offset("t", 1, 0)
    with pytest.raises(ConfigError, match=r"other\[0\] is not part of this run's plan"):
        tr.target_offset("other", 0, 0)


def test_sink_offsets_are_translated_and_source_offsets_kept():
    sink = {"type": "sink", "offsets": [{"partition": {"kafka_topic": "t", "kafka_partition": 0},
                                         "offset": {"kafka_offset": 15}}]}
    assert translated_offsets(sink, translator()) == [
        {"partition": {"kafka_topic": "t", "kafka_partition": 0}, "offset": {"kafka_offset": 105}}]
    source = {"type": "source", "offsets": [{"partition": {"filename": "/f"}, "offset": {"position": 7}}]}
    assert translated_offsets(source, translator()) == source["offsets"]


def test_target_config_points_client_overrides_at_the_target():
    config = {"connector.class": "X", "producer.override.bootstrap.servers": "src:9092", "file": "/a"}
    assert target_config(config, target_bootstrap="tgt:9092", overrides={"file": "/b"}) == {
        "connector.class": "X", "producer.override.bootstrap.servers": "tgt:9092", "file": "/b"}
    assert target_config(config) == config
