from __future__ import annotations

from kmigrate.run.targets.prepare import COPY_SETTINGS, conflicts, desired_configs


def test_effective_retention_and_limits_travel_even_when_the_source_uses_broker_defaults():
    explicit = {"cleanup.policy": "compact", "leader.replication.throttled.replicas": "*",
                "message.timestamp.type": "LogAppendTime", "segment.bytes": "1048576"}
    effective = {**explicit, "retention.ms": "-1", "retention.bytes": "-1", "max.message.bytes": "2097152",
                 "delete.retention.ms": "86400000", "min.compaction.lag.ms": "0", "max.compaction.lag.ms": "9223372036854775807"}
    wanted = desired_configs(explicit, effective)
    assert wanted["retention.ms"] == "-1" and wanted["max.message.bytes"] == "2097152"
    assert wanted["message.timestamp.type"] == "LogAppendTime"  # kept after the copy (the copy sets CreateTime)
    assert wanted["segment.bytes"] == "1048576"
    assert "leader.replication.throttled.replicas" not in wanted


def test_conflicts_allow_a_larger_max_message_bytes_only():
    wanted = {"retention.ms": "-1", "max.message.bytes": "2097152"}
    assert conflicts(wanted, {"retention.ms": "-1", "max.message.bytes": "4194304"}) == {}
    assert conflicts(wanted, {"retention.ms": "604800000", "max.message.bytes": "1048588"}) == {
        "retention.ms": ("604800000", "-1"), "max.message.bytes": ("1048588", "2097152")}


def test_the_settings_the_copy_changes_are_no_conflict():
    wanted = {"message.timestamp.type": "LogAppendTime", "message.timestamp.after.max.ms": "3600000"}
    assert conflicts(wanted, dict(COPY_SETTINGS)) == {}
