"""The project's exceptions: each message names the thing that failed and the way out."""
from __future__ import annotations


class KmigrateError(Exception):
    """Base of every error this library raises on purpose."""


class ConfigError(KmigrateError):
    """A client or run setting is missing or invalid."""


class ConnectError(KmigrateError):
    """A Kafka Connect REST call failed."""

    def __init__(self, message: str, *, status: int | None = None, connector: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.connector = connector


class ConnectUnreachable(ConnectError):
    """The Connect REST endpoint did not answer."""


class ConnectorNotFound(ConnectError):
    """404: the connector does not exist on that Connect cluster."""


class ConnectorStateError(ConnectError):
    """400/409: the connector is not in a state that allows the call, or it already exists."""


class ConnectTimeout(ConnectError):
    """A wait on the Connect cluster (rebalance, stop, start) ran past its deadline."""
