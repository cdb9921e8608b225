"""Topic configs a Kafka 4 target no longer knows: mapped to their successors or dropped (pure logic)."""
from __future__ import annotations

from kmigrate.run.targets.config_versions import for_target
from kmigrate.run.targets.prepare import desired_configs


def test_removed_configs_are_mapped_or_dropped_for_a_kafka_4_target():
    source = {"message.format.version": "0.10.2-IV0", "message.downconversion.enable": "false",
              "message.timestamp.difference.max.ms": "86400000", "retention.ms": "1000"}
    configs, changes = for_target(source, kafka_4=True)
    assert configs == {"retention.ms": "1000", "message.timestamp.before.max.ms": "86400000",
                       "message.timestamp.after.max.ms": "86400000"}
    assert set(changes) == {"message.format.version", "message.downconversion.enable",
                            "message.timestamp.difference.max.ms"}
    assert "KIP-937" in changes["message.timestamp.difference.max.ms"]


def test_successors_the_source_sets_itself_win_and_an_older_target_keeps_everything():
    source = {"message.timestamp.difference.max.ms": "5000", "message.timestamp.before.max.ms": "7000"}
    configs, changes = for_target(source, kafka_4=True)
    assert configs == {"message.timestamp.before.max.ms": "7000", "message.timestamp.after.max.ms": "5000"}
    assert for_target(source, kafka_4=False) == (source, {})


def test_desired_configs_of_a_2_8_topic_create_on_kafka_4():
    explicit = {"message.format.version": "2.8-IV1", "cleanup.policy": "delete"}
    effective = {**explicit, "retention.ms": "604800000", "message.timestamp.difference.max.ms": str(2**63 - 1)}
    wanted = desired_configs(explicit, effective)
    assert "message.format.version" not in wanted and wanted["cleanup.policy"] == "delete"
