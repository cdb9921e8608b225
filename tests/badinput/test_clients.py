"""Bad client settings of issue 33: clients files of the wrong shape, TLS files that are not there,
librdkafka settings misspelt, bootstrap servers without a port, a Connect connection that answers
with something that is not Kafka Connect, and a Spark job whose target is its source. Each ends in
a KmigrateError naming the thing and the way out, before anything is written."""
from __future__ import annotations

import importlib
import json
import os

from kmigrate.claims.log import CLAIMS_TOPIC
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.run.checks import versions
from kmigrate_spark.clients import CLIENTS_ENV, load_clients, load_clients_from

from tests.support.badinput import refused
from tests.support.local_http import serving


def claims_on(cluster: ClusterConfig):
    """`written`: the claims topic, when it exists on `cluster` (a source has none)."""
    def left() -> list[str]:
        with ClusterAdmin(cluster, timeout_s=10) as admin:
            return [t for t in admin.list_topics() if t == CLAIMS_TOPIC]
    return left


def clients_file(tmp_path, name: str, content: str):
    path = tmp_path / name
    path.write_text(content)
    os.chmod(path, 0o600)
    return path


def test_clients_files_of_the_wrong_shape(stack, tmp_path, monkeypatch):
    target = {"bootstrap.servers": stack.target.bootstrap_servers}
    for kind, content, words in [
        ("clients file source is a string", {"source": stack.source.bootstrap_servers, "target": target},
         ("'source' is a string", "object of librdkafka settings")),
        ("clients file source is null", {"source": None, "target": target},
         ("'source' is null", "object of librdkafka settings")),
        ("clients file target is a list", {"source": target, "target": [target]},
         ("'target' is a list", "object of librdkafka settings")),
        ("clients file is a list", [target, target], ("holds a list", "'source' and 'target'")),
        ("clients file bootstrap without a port", {"source": {"bootstrap.servers": "localhost"}, "target": target},
         ("source cluster", "'localhost'", "host:port")),
    ]:
        path = clients_file(tmp_path, kind.replace(" ", "-") + ".json", json.dumps(content))
        refused(kind, lambda p=path: load_clients(p), str(path), *words)
    broken = clients_file(tmp_path, "broken.json", '{"source": {"bootstrap.servers": "localhost:19092"},')
    refused("clients file not JSON", lambda: load_clients(broken), str(broken), "is not JSON", "'source' and 'target'")
    monkeypatch.setenv(CLIENTS_ENV, json.dumps({"source": "localhost:19092", "target": target}))
    refused("clients env source is a string", lambda: load_clients_from(None), CLIENTS_ENV, "'source' is a string",
            "object of librdkafka settings")


def test_tls_files_that_are_not_there(stack, tmp_path):
    ca = tmp_path / "no-such-ca.pem"
    source = ClusterConfig("source", {**stack.source.settings, "security.protocol": "SSL", "ssl.ca.location": str(ca)})
    refused("TLS file missing", lambda: ClusterAdmin(source), "source cluster", "ssl.ca.location", str(ca),
            "does not exist", "put the file there")
    refused("TLS file missing (raw connection)", lambda: versions.check_apis(source, "source"), "ssl.ca.location",
            str(ca), "does not exist")
    key = tmp_path / "client.key"
    target = ClusterConfig("target", {**stack.target.settings, "security.protocol": "SSL",
                                      "ssl.certificate.location": str(tmp_path / "client.pem"),
                                      "ssl.key.location": str(key), "ssl.key.password": "s3cret"})
    error = refused("TLS certificate missing", lambda: ClusterAdmin(target), "target cluster",
                    "ssl.certificate.location", "client.pem", written=claims_on(stack.source))
    assert "s3cret" not in str(error)


def test_client_settings_librdkafka_does_not_take(stack):
    misspelt = ClusterConfig("target", {**stack.target.settings, "sasl.mechanismz": "PLAIN"})
    refused("misspelt librdkafka key", lambda: ClusterAdmin(misspelt), "target", "'sasl.mechanismz'",
            "not a librdkafka setting", "fix its spelling")
    invalid = ClusterConfig("source", {**stack.source.settings, "socket.timeout.ms": "ten seconds"})
    refused("librdkafka setting with an invalid value", lambda: ClusterAdmin(invalid), "source",
            "'socket.timeout.ms'", "invalid value", "'ten seconds'")
    refused("bootstrap without a port", lambda: ClusterConfig("source", {"bootstrap.servers": "localhost"}),
            "source cluster", "'localhost'", "host:port", "e.g. localhost:9092")
    refused("bootstrap with a port that is not a number",
            lambda: ClusterConfig("target", {"bootstrap.servers": "localhost:29092,localhost:kafka"}),
            "target cluster", "'localhost:kafka'", "numeric port")


def test_airflow_kafka_connection_without_a_port(airflow_db, monkeypatch):
    from kmigrate_airflow.hooks import KafkaClusterHook

    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_NO_PORT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "localhost"}}))
    refused("Airflow Kafka connection bootstrap without a port",
            lambda: KafkaClusterHook("kafka_no_port", "source").cluster(),
            "'kafka_no_port'", "source", "'localhost'", "host:port")
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_MISSPELT", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "localhost:19092", "sasl.mechanismz": "PLAIN"}}))
    ok, message = KafkaClusterHook("kafka_misspelt", "source").test_connection()
    assert not ok and "'kafka_misspelt'" in message and "'sasl.mechanismz' is not a librdkafka setting" in message


def test_connect_answering_something_else(tmp_path):
    page = "<!DOCTYPE html><html><head><title>Sign in to the proxy</title></head><body>SSO</body></html>"
    with serving(page, "text/html; charset=utf-8") as url:
        refused("Connect answers HTML", lambda: ConnectClient(url).connectors(), url, "GET /connectors",
                "text/html", "Sign in to the proxy", "not the Kafka Connect REST API", "login page")
    with serving('{"status": "UP", "components": {"db": "UP"}}', "application/json") as url:
        refused("Connect answers JSON of another shape", lambda: ConnectClient(url).connectors(), url,
                "GET /connectors", "JSON of another shape", "an object with keys status, components",
                "not the Kafka Connect REST API")
        refused("Connect answers JSON of another shape (status)", lambda: ConnectClient(url).state("c1"), url,
                "GET /connectors/c1/status", "JSON of another shape")


def job_driver():
    """kmigrate_spark.guards, what the copy and verify jobs run on the driver before they write."""
    return importlib.import_module("kmigrate_spark.guards")


def test_spark_job_target_is_the_source(stack, tmp_path):
    driver = job_driver()
    port = stack.source.addresses[0][1]
    for kind, target, words in [
        ("spark job target is the source", stack.source.settings, ("same cluster", "pick another target")),
        ("spark job target is the source under another address", {"bootstrap.servers": f"127.0.0.1:{port}"},
         ("same cluster", "id")),
    ]:
        path = clients_file(tmp_path, kind.replace(" ", "-") + ".json",
                            json.dumps({"source": dict(stack.source.settings), "target": dict(target)}))
        refused(kind, lambda p=path: driver.check_clusters(load_clients(p)), *words, written=claims_on(stack.source))
