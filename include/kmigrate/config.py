"""The one builder of confluent-kafka client configs for a cluster (admin, producer, consumer)."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from confluent_kafka import KafkaException

from kmigrate import client_settings
from kmigrate.errors import ConfigError
from kmigrate.secrets import HIDDEN, redact_setting, secret_setting

C = TypeVar("C")


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `config` with secret values replaced, safe to log: those of every secret setting
    (kmigrate.secrets.secret_setting), and the credentials of a URL."""
    return {k: (HIDDEN if secret_setting(k) else redact_setting(k, v)) for k, v in config.items()}


@dataclasses.dataclass(frozen=True)
class ClusterConfig:
    """A Kafka cluster's client settings: `bootstrap.servers` plus anything else librdkafka takes
    (SASL, SSL, ...), passed through unchanged to every client built from it."""

    name: str
    settings: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not self.settings.get("bootstrap.servers"):
            raise ConfigError(
                f"cluster {self.name!r}: 'bootstrap.servers' is missing; set it in the connection's extra JSON "
                "(Airflow) or the client config you pass"
            )
        client_settings.addresses(self.name, self.settings["bootstrap.servers"])  # ConfigError naming a bad entry

    @classmethod
    def from_bootstrap(cls, name: str, bootstrap_servers: str, **settings: Any) -> ClusterConfig:
        return cls(name, {"bootstrap.servers": bootstrap_servers, **settings})

    @property
    def bootstrap_servers(self) -> str:
        return str(self.settings["bootstrap.servers"])

    def __repr__(self) -> str:
        return f"ClusterConfig({self.name!r}, {redact(self.settings)!r})"

    def admin(self, **overrides: Any) -> dict[str, Any]:
        client_settings.check_files(self.name, self.settings)
        return {**self.settings, **overrides}

    def producer(self, **overrides: Any) -> dict[str, Any]:
        client_settings.check_files(self.name, self.settings)
        return {**self.settings, **overrides}

    def consumer(self, group_id: str | None = None, **overrides: Any) -> dict[str, Any]:
        client_settings.check_files(self.name, self.settings)
        base: dict[str, Any] = {
            **self.settings,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
        base["group.id"] = group_id or "kmigrate-reader"
        return {**base, **overrides}

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(host, port) of each bootstrap server."""
        return client_settings.addresses(self.name, self.settings["bootstrap.servers"])

    def client(self, factory: Callable[[dict[str, Any]], C], config: dict[str, Any]) -> C:
        """`factory(config)`: a confluent-kafka client of this cluster, or a ConfigError naming the
        setting librdkafka refuses (instead of its bare KafkaException)."""
        try:
            return factory(config)
        except KafkaException as exc:
            secret = {k for k in config if secret_setting(k)}
            raise client_settings.refused(self.name, config, exc, secret) from exc
