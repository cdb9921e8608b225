"""What an unplanned failover makes of the connectors the mirror kept (pure logic)."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConfigError
from kmigrate.run.mirror.connectors import capped, with_secrets


def sink_offset(topic: str, partition: int, offset: int) -> dict:
    return {"partition": {"kafka_topic": topic, "kafka_partition": partition}, "offset": {"kafka_offset": offset}}


def test_a_sink_connectors_offsets_are_capped_at_the_dr_ends_and_a_source_connectors_kept():
    sink = {"type": "sink", "offsets": [sink_offset("a", 0, 90), sink_offset("a", 1, 10), sink_offset("b", 0, 5)]}
    assert capped(sink, {("a", 0): 70, ("a", 1): 70}) == [sink_offset("a", 0, 70), sink_offset("a", 1, 10),
                                                           sink_offset("b", 0, 5)]
    source = {"type": "source", "offsets": [{"partition": {"filename": "/x"}, "offset": {"position": 123}}]}
    assert capped(source, {("a", 0): 0}) == source["offsets"]


def test_secrets_the_mirror_did_not_keep_must_come_from_the_overrides_and_are_named_never_shown():
    entry = {"config": {"connection.password": "[secret]", "topic": "t"}, "secret_keys": ["connection.password"]}
    with pytest.raises(ConfigError, match=r"'jdbc' has secrets \(connection.password\).*connector_overrides") as caught:
        with_secrets("jdbc", entry, {"topic": "t"})
    assert "[secret]" not in str(caught.value)
    assert with_secrets("jdbc", entry, {"connection.password": "pw"}) == entry["config"]  # applied by target_config
