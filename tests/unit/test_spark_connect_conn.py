"""The DAGs' Spark Connect connection (kmigrate_airflow.hooks.spark_connect_url): the server's URL
built from an Airflow connection of the Spark provider's type spark_connect, its token masked in
what a task log shows; no connection of that name: None (the jobs run with spark-submit); a
connection of another type or without a host: refused, naming it and the way out."""
from __future__ import annotations

import json
import uuid

import pytest
from kmigrate.errors import ConfigError
from kmigrate_spark.conf import shown_remote


def define(monkeypatch, conn_id: str, **conn) -> None:
    """An Airflow connection for this test only, as an AIRFLOW_CONN_<ID> environment variable."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_the_url_of_a_spark_connect_connection_with_its_token_masked(monkeypatch):
    from airflow.sdk.log import redact
    from kmigrate_airflow.hooks import spark_connect_url

    token = f"tok-{uuid.uuid4().hex}"
    define(monkeypatch, "sc_with_token", conn_type="spark_connect", host="spark", port=15002, login="me",
           password=token, extra={"use_ssl": True})
    url = spark_connect_url("sc_with_token")
    assert url == f"sc://spark:15002/;user_id=me;token={token};use_ssl=True"
    assert shown_remote(url) == "sc://spark:15002/;user_id=me;token=***;use_ssl=True"
    assert token not in redact(f"running copy_partitions.py on {url}")  # Airflow's log masker knows it now


def test_a_connection_without_parameters_is_the_plain_url(monkeypatch):
    from kmigrate_airflow.hooks import spark_connect_url

    define(monkeypatch, "sc_plain", conn_type="spark_connect", host="127.0.0.1", port=30102)
    assert spark_connect_url("sc_plain") == "sc://127.0.0.1:30102"
    monkeypatch.setenv("AIRFLOW_CONN_SC_URI", "spark-connect://spark-connect:15002")  # the URI form
    assert spark_connect_url("sc_uri") == "sc://spark-connect:15002"


def test_no_connection_means_spark_submit():
    from kmigrate_airflow.hooks import spark_connect_url

    assert spark_connect_url(None) is None and spark_connect_url("") is None
    assert spark_connect_url(f"no_such_connection_{uuid.uuid4().hex[:8]}") is None


def test_a_connection_of_another_type_or_without_a_host_is_refused(monkeypatch):
    from kmigrate_airflow.hooks import spark_connect_url

    define(monkeypatch, "sc_kafka", conn_type="kafka", extra={"bootstrap.servers": "localhost:19092"})
    with pytest.raises(ConfigError, match=r"'sc_kafka' is of type 'kafka', not a Spark Connect connection.*"
                                          r"empty the spark_connect_conn_id param.*spark-submit"):
        spark_connect_url("sc_kafka")
    define(monkeypatch, "sc_no_host", conn_type="spark_connect", port=15002)
    with pytest.raises(ConfigError, match="'sc_no_host' has no host"):
        spark_connect_url("sc_no_host")
