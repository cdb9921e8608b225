"""The compat profile of the local stack: an older, ZooKeeper-era source beside the KRaft target
(pure settings: no process is started)."""
from __future__ import annotations

from pathlib import Path

from tests.support.stack import load_stack_module

stack = load_stack_module()


def test_a_zookeeper_era_source_gets_a_zookeeper_and_its_own_version_home():
    source, target = stack.compat_clusters("3.9.1")
    assert source.zookeeper and not target.zookeeper
    assert source.home.name == "kafka-3.9.1" and target.home.name == f"kafka-{stack.KAFKA_VERSION}"
    services = stack.services((source, target), Path("/tmp/x"))
    assert [(s.name, s.port) for s in services] == [
        ("source-zookeeper", 19393), ("source-kafka", 19392), ("target-kafka", 29392),
        ("source-connect", 18383), ("target-connect", 28383)]
    assert next(s for s in services if s.name == "source-kafka").ports == [19392]  # no controller listener


def test_a_zookeeper_era_broker_has_no_kraft_settings():
    settings = stack.ZK_BROKER_SETTINGS
    assert not {"process.roles", "node.id", "controller.listener.names"} & set(settings)
    assert not [k for k in settings if k.startswith("share.")]
    assert settings["auto.create.topics.enable"] == "false"


def test_a_4x_source_in_the_compat_profile_is_kraft():
    source, _ = stack.compat_clusters("4.3.1")
    assert not source.zookeeper
    assert [s.kind for s in stack.services((source,), Path("/tmp/x"))] == ["kafka", "connect"]


def test_the_compat_profile_is_not_mixed_with_others(capsys):
    assert stack.main(["status", "--source-version", "2.8.2", "--brokers", "3"]) == 2
    assert "separate profiles" in capsys.readouterr().err


def test_a_target_version_gets_its_own_home_and_state_dir():
    source, target = stack.compat_clusters("4.3.1", "4.4.0")
    assert (source.home.name, target.home.name) == ("kafka-4.3.1", "kafka-4.4.0") and not target.zookeeper
    # a cluster formatted by one Kafka version may not start under an older one: each pair its own state
    assert stack.compat_state_dir("4.3.1", "4.4.0").name == ".stack-compat-4.3.1-to-4.4.0"
    assert stack.compat_state_dir("4.4.0").name == ".stack-compat-4.4.0"
    assert "4.4.0" in stack.SOURCE_VERSIONS and "4.4.0" in stack.TARGET_VERSIONS
