"""The multi-broker profile of the local stack (pure settings: no process is started)."""
from __future__ import annotations

from pathlib import Path

from tests.support.stack import load_stack_module

stack = load_stack_module()


def test_each_node_has_its_own_ports_and_the_bootstrap_lists_them_all():
    source, target = stack.multi_clusters(3)
    assert [source.broker_port(n) for n in source.nodes] == [19292, 19302, 19312]
    assert [target.controller_port_of(n) for n in target.nodes] == [29293, 29303, 29313]
    assert source.bootstrap == "localhost:19292,localhost:19302,localhost:19312"
    names = [s.name for s in stack.services((source, target), Path("/tmp/x")) if s.kind == "kafka"]
    assert names == [f"{c}-kafka-{n}" for c in ("source", "target") for n in (1, 2, 3)]


def test_a_single_broker_cluster_keeps_its_names_and_ports():
    source = stack.DEFAULT_CLUSTERS[0]
    assert source.bootstrap == "localhost:19092"
    assert [s.name for s in stack.services((source,), Path("/tmp/x"))] == ["source-kafka", "source-connect"]


def test_multi_broker_settings_replicate_like_production():
    settings = stack.multi_broker_settings(3)
    assert settings["default.replication.factor"] == "3"
    assert settings["min.insync.replicas"] == "2"
    assert settings["offsets.topic.replication.factor"] == settings["transaction.state.log.replication.factor"] == "3"
    assert settings["transaction.state.log.min.isr"] == "2"
    assert settings["unclean.leader.election.enable"] == "false"
    two = stack.multi_broker_settings(2)
    assert (two["default.replication.factor"], two["min.insync.replicas"]) == ("2", "2")


def test_secure_and_multi_broker_profiles_are_not_mixed(capsys):
    assert stack.main(["status", "--secure", "--brokers", "3"]) == 2
    assert "--secure, --brokers N and --source-version are separate profiles" in capsys.readouterr().err
