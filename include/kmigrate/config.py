"""The one builder of confluent-kafka client configs for a cluster (admin, producer, consumer)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from kmigrate.errors import ConfigError

# Keys whose values never appear in repr() or logs.
SECRET_KEYS = frozenset({
    "sasl.password", "sasl.oauthbearer.client.secret", "ssl.key.password", "ssl.keystore.password",
    "ssl.truststore.password", "ssl.key.pem", "ssl.keystore.pem",
})


def redact(config: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `config` with secret values replaced, safe to log."""
    return {k: ("***" if k in SECRET_KEYS else v) for k, v in config.items()}


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

    @classmethod
    def from_bootstrap(cls, name: str, bootstrap_servers: str, **settings: Any) -> ClusterConfig:
        return cls(name, {"bootstrap.servers": bootstrap_servers, **settings})

    @property
    def bootstrap_servers(self) -> str:
        return str(self.settings["bootstrap.servers"])

    def __repr__(self) -> str:
        return f"ClusterConfig({self.name!r}, {redact(self.settings)!r})"

    def admin(self, **overrides: Any) -> dict[str, Any]:
        return {**self.settings, **overrides}

    def producer(self, **overrides: Any) -> dict[str, Any]:
        return {**self.settings, **overrides}

    def consumer(self, group_id: str | None = None, **overrides: Any) -> dict[str, Any]:
        base: dict[str, Any] = {
            **self.settings,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
        base["group.id"] = group_id or "kmigrate-reader"
        return {**base, **overrides}
