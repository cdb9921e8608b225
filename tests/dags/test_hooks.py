"""The project's hooks against the real local stack: what a connection's Test button shows."""
from __future__ import annotations

import json

import pytest
from kmigrate.errors import ConfigError


def test_the_kafka_hook_tests_a_cluster_and_names_one_that_does_not_answer(stack, airflow_db, monkeypatch):
    from kmigrate_airflow.hooks import KafkaClusterHook

    ok, message = KafkaClusterHook("kafka_source", "source").test_connection()
    assert ok and "answers at localhost:19092" in message, message
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_NOWHERE", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1", "socket.timeout.ms": 2000}}))
    ok, message = KafkaClusterHook("kafka_nowhere", "source").test_connection()
    assert not ok and "127.0.0.1:1" in message
    with pytest.raises(ConfigError, match="'kafka_missing' is not defined in Airflow"):
        KafkaClusterHook("kafka_missing", "source").cluster()


def test_the_connect_hook_tests_a_connect_cluster(stack, airflow_db, monkeypatch):
    from kmigrate_airflow.hooks import KafkaConnectHook

    ok, message = KafkaConnectHook("connect_target").test_connection()
    assert ok and message.startswith("Kafka Connect 4.3.1 answers at http://localhost:28083"), message
    monkeypatch.setenv("AIRFLOW_CONN_CONNECT_NOWHERE", json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": 1}))
    ok, message = KafkaConnectHook("connect_nowhere").test_connection()
    assert not ok and "http://127.0.0.1:1 is unreachable" in message
