"""The DAGs' Kafka Connect connection (kmigrate_airflow.hooks.KafkaConnectHook): credentials typed
into the host field go to basic auth and Airflow's log masker, out of the URL every message shows;
an extra that is no JSON object is refused naming the connection."""
from __future__ import annotations

import json
import uuid

import pytest
from kmigrate.errors import ConfigError


def define(monkeypatch, conn_id: str, **conn) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_a_password_typed_into_the_host_goes_to_basic_auth_and_the_masker(monkeypatch):
    from airflow.sdk.log import redact
    from kmigrate_airflow.hooks import connect_client

    password = f"p@ss/{uuid.uuid4().hex}"
    define(monkeypatch, "connect_typed", conn_type="http", host=f"admin:{password}@connect", port=8083)
    client = connect_client("connect_typed")
    assert client.url == "http://connect:8083" and client._session.auth == ("admin", password)
    assert password not in redact(f"Kafka Connect at http://admin:{password}@connect:8083 is unreachable")


def test_an_extra_that_is_a_list_is_refused_naming_the_connection(monkeypatch):
    from kmigrate_airflow.hooks import connect_client

    define(monkeypatch, "connect_list_extra", conn_type="http", host="connect", port=8083, extra=[1, 2])
    with pytest.raises(ConfigError, match="'connect_list_extra': its extra is a list, not a JSON object"):
        connect_client("connect_list_extra")
