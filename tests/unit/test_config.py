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
