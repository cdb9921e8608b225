"""Pure logic of the version checks: which missing request is named, and the report's lines."""
from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.run.checks import versions

KAFKA_2_7 = {1: (0, 12), 0: (0, 8), 44: (0, 1)}  # no DescribeCluster (key 60) before 2.8
KAFKA_2_8 = {**KAFKA_2_7, 60: (0, 0)}


def test_a_source_older_than_2_8_is_refused_naming_the_request_and_release(monkeypatch):
    monkeypatch.setattr(versions, "api_versions", lambda cluster: KAFKA_2_7)
    with pytest.raises(ConfigError) as raised:
        versions.check_apis(ClusterConfig.from_bootstrap("source", "old:9092"), "source")
    message = str(raised.value)
    assert "source cluster (old:9092)" in message and "DescribeCluster" in message and "Kafka 2.8 added" in message
    assert "Fetch" not in message and "nothing was stopped or written" in message


def test_a_2_8_source_passes_and_an_unknown_transport_is_not_checked(monkeypatch):
    monkeypatch.setattr(versions, "api_versions", lambda cluster: KAFKA_2_8)
    versions.check_apis(ClusterConfig.from_bootstrap("source", "old:9092"), "source")
    monkeypatch.setattr(versions, "api_versions", lambda cluster: None)
    versions.check_apis(ClusterConfig.from_bootstrap("target", "x:9092"), "target")


def test_the_report_names_the_source_version_and_how_connectors_were_stopped():
    snapshot = {"versions": {"source_kafka": "ZooKeeper, inter.broker.protocol.version 2.8-IV1"},
                "connectors": {"fs-sink": {"worker": "2.8.2", "stopped_by": "pause",
                                           "offsets_from": "consumer group connect-fs-sink"}}}
    text = "\n".join(versions.report_lines(snapshot))
    assert "Source Kafka: ZooKeeper, inter.broker.protocol.version 2.8-IV1" in text
    assert "Source Connect: 2.8.2" in text and "/pause: Connect 2.8.2 has no STOPPED state" in text
    assert "fs-sink: consumer group connect-fs-sink" in text
    assert "Source Connect" not in "\n".join(versions.report_lines({"connectors": {}}))


def test_api_versions_of_a_cluster_nobody_answers_for_are_left_to_the_later_checks():
    # nothing listens on these ports: the reachability checks that follow name the cluster
    assert versions.api_versions(ClusterConfig.from_bootstrap("source", "localhost:1,localhost:2")) is None
