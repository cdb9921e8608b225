"""Hooks for the project's connections. Kafka clusters are connections of the Kafka provider's type
(`kafka`), whose extra JSON is the whole librdkafka config (`bootstrap.servers` and any SASL/SSL
settings). Kafka Connect clusters are HTTP connections: host, port, schema (http/https),
login/password for basic auth, and extra `{"verify": false | "/ca.pem", "cert": "/client.pem"}`
for TLS. Both hooks answer the connection's Test button (`test_connection`)."""
from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.sdk import BaseHook
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient


def _connection(hook: BaseHook, conn_id: str, what: str) -> Any:
    try:
        return hook.get_connection(conn_id)
    except Exception as exc:  # noqa: BLE001 - Airflow raises its own not-found error type
        raise ConfigError(f"the {what} connection id {conn_id!r} is not defined in Airflow; create it (Admin > "
                          "Connections) or fix the parameter") from None  # Airflow's lookup error adds nothing


class KafkaClusterHook(KafkaBaseHook):
    """One Kafka cluster of a migration, as a kmigrate client config."""

    def __init__(self, kafka_config_id: str = KafkaBaseHook.default_conn_name, name: str = "kafka") -> None:
        super().__init__(kafka_config_id=kafka_config_id)
        self.name = name

    def cluster(self) -> ClusterConfig:
        """The client config; ConfigError when the connection is missing or has no bootstrap.servers."""
        conn = _connection(self, self.kafka_config_id, f"{self.name} Kafka")
        extra = conn.extra_dejson
        where = f"Airflow connection {self.kafka_config_id!r}"
        if not isinstance(extra, dict):
            raise ConfigError(f"{where}: its extra is {type(extra).__name__}, not a JSON object of librdkafka "
                              'settings; set the extra to {"bootstrap.servers": "host:port", ...}')
        try:  # bootstrap.servers each host:port (the TLS files and the setting names: when a client is built)
            return ClusterConfig(self.name, dict(extra))
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    def test_connection(self) -> tuple[bool, str]:
        try:
            cluster = self.cluster()
            with ClusterAdmin(cluster, timeout_s=10) as admin:  # ConfigError naming a missing file or a bad setting
                admin.check_reachable()
                return True, f"Kafka cluster {admin.cluster_id()} answers at {cluster.bootstrap_servers}"
        except KmigrateError as exc:
            return False, (str(exc) if self.kafka_config_id in str(exc)
                           else f"Airflow connection {self.kafka_config_id!r}: {exc}")


class KafkaConnectHook(BaseHook):
    """One Kafka Connect cluster (its REST API), as a kmigrate Connect client."""

    conn_name_attr = "connect_conn_id"
    default_conn_name = "connect_default"
    conn_type = "http"
    hook_name = "Kafka Connect"

    def __init__(self, connect_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.connect_conn_id = connect_conn_id

    def get_conn(self) -> ConnectClient:
        conn = _connection(self, self.connect_conn_id, "Kafka Connect")
        extra = conn.extra_dejson
        url = f"{conn.schema or 'http'}://{conn.host}" + (f":{conn.port}" if conn.port else "")
        auth = (conn.login, conn.password or "") if conn.login else None
        return ConnectClient(url, auth=auth, verify=extra.get("verify", True), cert=extra.get("cert"),
                             offsets_topic=extra.get("offsets_topic"))

    def test_connection(self) -> tuple[bool, str]:
        try:
            client = self.get_conn()
            return True, f"Kafka Connect {client.version().get('version', '?')} answers at {client.url}"
        except KmigrateError as exc:
            return False, str(exc)


def kafka_cluster(conn_id: str, name: str) -> ClusterConfig:
    return KafkaClusterHook(conn_id, name).cluster()


def connect_client(conn_id: str) -> ConnectClient:
    return KafkaConnectHook(conn_id).get_conn()
