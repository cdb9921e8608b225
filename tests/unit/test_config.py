from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig, redact
from kmigrate.errors import ConfigError


def test_missing_bootstrap_servers_names_the_cluster_and_the_fix():
    with pytest.raises(ConfigError, match="cluster 'source'.*bootstrap.servers.*extra JSON"):
        ClusterConfig("source", {"security.protocol": "SASL_SSL"})


def test_settings_pass_through_to_every_client():
    cfg = ClusterConfig("target", {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                                   "sasl.mechanism": "PLAIN", "sasl.username": "u", "sasl.password": "s3cret"})
    for client in (cfg.admin(), cfg.producer(), cfg.consumer("g")):
        assert client["security.protocol"] == "SASL_SSL" and client["sasl.password"] == "s3cret"
    assert cfg.consumer("g")["group.id"] == "g"
    assert cfg.consumer()["isolation.level"] == "read_committed"
    assert cfg.producer(**{"linger.ms": 50})["linger.ms"] == 50


def test_secrets_never_show_in_repr():
    cfg = ClusterConfig.from_bootstrap("x", "b:9092", **{"sasl.password": "s3cret", "ssl.key.password": "k3y"})
    assert "s3cret" not in repr(cfg) and "k3y" not in repr(cfg)
    assert redact(cfg.settings)["sasl.password"] == "***"
    assert redact(cfg.settings)["bootstrap.servers"] == "b:9092"


@pytest.mark.parametrize("servers, entry", [("localhost", "'localhost'"), ("b1:9092,b2", "'b2'"),
                                            ("b:port", "'b:port'"), ("b:99999", "'b:99999'")])
def test_bootstrap_servers_each_need_host_and_a_numeric_port(servers, entry):
    with pytest.raises(ConfigError, match=f"source cluster: bootstrap.servers entry {entry}.*host:port"):
        ClusterConfig("source", {"bootstrap.servers": servers})


def test_bootstrap_servers_parse_with_protocols_ipv6_and_spaces():
    cfg = ClusterConfig("t", {"bootstrap.servers": "SSL://b1:9093, [::1]:9092 b3:1"})
    assert cfg.addresses == [("b1", 9093), ("::1", 9092), ("b3", 1)]
    with pytest.raises(ConfigError, match="'bootstrap.servers' is list"):
        ClusterConfig("t", {"bootstrap.servers": ["b:9092"]})


def test_a_missing_tls_file_is_named_when_a_client_is_built(tmp_path):
    ca = tmp_path / "ca.pem"
    cfg = ClusterConfig("target", {"bootstrap.servers": "b:9093", "security.protocol": "SSL",
                                   "ssl.ca.location": str(ca), "ssl.key.password": "k3y"})
    for build in (cfg.admin, cfg.producer, cfg.consumer):
        with pytest.raises(ConfigError, match=f"target cluster: ssl.ca.location '{ca}' does not exist on host"):
            build()
    ca.write_text("")
    cfg.admin()  # there now: librdkafka reads it
    probe = ClusterConfig("x", {"bootstrap.servers": "b:9093", "ssl.ca.location": "probe"})
    assert probe.admin()["ssl.ca.location"] == "probe"  # librdkafka's system store, not a file


def test_librdkafka_refusals_name_the_cluster_and_the_setting():
    from confluent_kafka import Producer

    misspelt = ClusterConfig("source", {"bootstrap.servers": "b:9092", "lingr.ms": 5})
    with pytest.raises(ConfigError, match="source: client setting 'lingr.ms' is not a librdkafka setting"):
        misspelt.client(Producer, misspelt.producer())
    bad = ClusterConfig("target", {"bootstrap.servers": "b:9092", "linger.ms": "soon"})
    with pytest.raises(ConfigError, match="target: client setting 'linger.ms' has an invalid value 'soon'"):
        bad.client(Producer, bad.producer())


def test_a_refused_secret_value_is_not_shown():
    from confluent_kafka import KafkaError, KafkaException
    from kmigrate.client_settings import refused

    exc = KafkaException(KafkaError(KafkaError._INVALID_ARG, 'Invalid value for configuration property "sasl.password"'))
    error = refused("target", {"sasl.password": "s3cret"}, exc, {"sasl.password"})
    assert "'sasl.password' has an invalid value (secret, not shown)" in str(error) and "s3cret" not in str(error)
