"""Hooks for the project's connections. Kafka clusters are connections of the Kafka provider's type
(`kafka`), whose extra JSON is the whole librdkafka config (`bootstrap.servers` and any SASL/SSL
settings). Kafka Connect clusters are HTTP connections: host, port, schema (http/https),
login/password for basic auth, and extra `{"verify": false | "/ca.pem", "cert": "/client.pem"}`
for TLS. Both hooks answer the connection's Test button (`test_connection`). A Spark Connect
server is a connection of the Spark provider's type (`spark_connect`: host, port, user id, token,
use_ssl), whose URL `spark_connect_url` builds."""
from __future__ import annotations

from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook
from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException
from airflow.sdk.log import mask_secret
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.connect import ConnectClient
from kmigrate.secrets import url_secrets

# the DAGs' param naming the Spark Connect connection (kmigrate_airflow.params.spark_params)
SPARK_CONNECT_PARAM = "spark_connect_conn_id"


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
        settings = self.settings()
        return ConnectClient(settings["url"], auth=tuple(settings["auth"]) if settings["auth"] else None,
                             verify=settings["verify"], cert=settings["cert"], offsets_topic=settings["offsets_topic"])

    def settings(self) -> dict[str, Any]:
        """What a client of this Connect cluster needs (its URL, credentials and TLS), as JSON."""
        conn = _connection(self, self.connect_conn_id, "Kafka Connect")
        extra = conn.extra_dejson
        where = f"Airflow connection {self.connect_conn_id!r}"
        if not isinstance(extra, dict):
            raise ConfigError(f"{where}: its extra is a {type(extra).__name__}, not a JSON object; set it to "
                              '{"verify": true | "/ca.pem", "cert": "/client.pem"} or leave it empty')
        host, login, password = conn.host or "", conn.login, conn.password
        if "@" in host:  # user:password@host typed into the host field (as typed, not %-encoded): basic auth,
            userinfo, host = host.rsplit("@", 1)  # kept out of the URL that every message and log line shows
            user, _, typed = userinfo.partition(":")
            if typed:
                mask_secret(typed)
            if not login:
                login, password = user, typed or password
        if password:
            mask_secret(password)
        if not host:
            raise ConfigError(f"{where} has no host; give the Connect worker's host (and port)")
        return {"url": f"{conn.schema or 'http'}://{host}" + (f":{conn.port}" if conn.port else ""),
                "auth": [login, password or ""] if login else None,
                "verify": extra.get("verify", True), "cert": extra.get("cert"), "offsets_topic": extra.get("offsets_topic")}

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


def spark_connect_url(conn_id: str | None) -> str | None:
    """The URL of the Spark Connect server of the Airflow connection `conn_id`, as the Spark
    provider's SparkConnectHook builds it (sc://HOST:PORT[/;user_id=...;token=...;use_ssl=...]), its
    token handed to Airflow's log masker: no task log line shows it. None when `conn_id` is empty or
    names no connection: the Spark jobs then run with spark-submit on spark_default. ConfigError,
    naming the connection and the way out, when it is not a Spark Connect connection or has no host."""
    if not conn_id:
        return None
    hook = SparkConnectHook(conn_id)
    try:
        conn = hook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    where = f"the Airflow connection {conn_id!r}"
    way_out = (f"create or fix it (Admin > Connections: type Spark Connect, the server's host and port), or empty "
               f"the {SPARK_CONNECT_PARAM} param to run the Spark jobs with spark-submit on spark_default")
    if conn.conn_type != SparkConnectHook.conn_type:
        raise ConfigError(f"{where} is of type {conn.conn_type!r}, not a Spark Connect connection "
                          f"({SparkConnectHook.conn_type}); {way_out}")
    if not conn.host or "/" in conn.host.split("://", 1)[-1]:
        raise ConfigError(f"{where} has {'no host' if not conn.host else 'a path in its host'}: give the Spark "
                          f"Connect server's host name and its port; {way_out}")
    if conn.password:
        mask_secret(conn.password)
    url = hook.get_connection_url()
    for secret in url_secrets(url):
        mask_secret(secret)  # the token as the URL quotes it
    return url.removesuffix("/")  # no parameters: sc://HOST:PORT, as a server's URL is usually written
