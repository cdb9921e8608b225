"""The Kafka client configs of the Spark jobs: read from a file only its owner may read, or from the
environment; never from a command line (they may hold SASL passwords)."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from typing import Any

from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.kafka.connect import ConnectClient

CLIENTS_ENV = "KMIGRATE_CLIENTS_JSON"


def load_clients(path: str | os.PathLike[str]) -> tuple[ClusterConfig, ClusterConfig]:
    """Source and target client configs from a JSON file {"source": {...}, "target": {...}} that only
    its owner may read (it may hold SASL passwords)."""
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except OSError as exc:
        raise ConfigError(f"client config file {file} cannot be read ({exc.strerror}); check the path") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"client config file {file} is readable by others (mode {stat.S_IMODE(mode):o}); "
                          f"it may hold credentials: chmod 600 {file}")
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"client config file {file} cannot be read ({exc}); give a UTF-8 JSON file") from exc
    return _parse_clients(text, f"client config file {file}")


SHAPE = ("a JSON object with 'source' and 'target' objects of librdkafka settings, "
         '{"source": {"bootstrap.servers": "host:port", ...}, "target": {...}}')


def _parse_clients(text: str, where: str) -> tuple[ClusterConfig, ClusterConfig]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{where} is not JSON ({exc}); it must be {SHAPE}") from exc
    except RecursionError:  # arrays or objects nested thousands deep: no clients file is
        raise ConfigError(f"{where} holds JSON nested too deep to read; it must be {SHAPE}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{where} holds {_kind(data)}; it must be {SHAPE}")
    for key in ("source", "target"):
        if key not in data:
            raise ConfigError(f"{where} has no {key!r} key; it must be {SHAPE}")
        if not isinstance(data[key], dict):
            raise ConfigError(f"{where}: {key!r} is {_kind(data[key])}; it must be an object of librdkafka settings "
                              f"(at least bootstrap.servers): {SHAPE}")
    try:
        return ClusterConfig("source", data["source"]), ClusterConfig("target", data["target"])
    except ConfigError as exc:  # a bootstrap.servers missing or not host:port
        raise ConfigError(f"{where}: {exc}") from exc


def _kind(value: object) -> str:
    """What a JSON value is, not what it holds (it may be a secret)."""
    return {str: "a string", type(None): "null", list: "a list", bool: "a boolean", int: "a number",
            float: "a number"}.get(type(value), type(value).__name__)


def clients_json(source: ClusterConfig, target: ClusterConfig, source_connect: dict[str, Any] | None = None) -> str:
    """The clients' JSON; `source_connect` (the mirror's: its connectors are read as it goes) is
    {"url", "auth": [user, password] or null, "verify", "cert"}."""
    data: dict[str, Any] = {"source": dict(source.settings), "target": dict(target.settings)}
    if source_connect:
        data["source_connect"] = source_connect
    return json.dumps(data)


def load_source_connect(path: str | os.PathLike[str] | None, **timeouts: float) -> ConnectClient:
    """The source Connect cluster's client from the client configs (`load_clients_from`'s file or
    environment); ConfigError when they hold none."""
    text = Path(path).read_text() if path else os.environ.get(CLIENTS_ENV) or "{}"
    try:
        given = json.loads(text).get("source_connect")
    except (ValueError, AttributeError, RecursionError):  # load_clients_from named what is wrong with them already
        given = None
    if not isinstance(given, dict) or not given.get("url"):
        raise ConfigError("connectors are selected but the client configs hold no source Connect cluster "
                          '("source_connect": {"url": ...}); give the mirror its source Connect connection')
    auth = given.get("auth")
    return ConnectClient(given["url"], auth=tuple(auth) if auth else None, verify=given.get("verify", True),
                         cert=given.get("cert"), offsets_topic=given.get("offsets_topic"), **timeouts)


def load_clients_from(path: str | os.PathLike[str] | None) -> tuple[ClusterConfig, ClusterConfig]:
    """From the file `path`, or else from the environment variable KMIGRATE_CLIENTS_JSON (how the
    Airflow operator hands them to spark-submit: never on a command line)."""
    if path:
        return load_clients(path)
    text = os.environ.get(CLIENTS_ENV)
    if not text:
        raise ConfigError(f"no client configs: pass --clients FILE (mode 600) or set {CLIENTS_ENV}")
    return _parse_clients(text, CLIENTS_ENV)


def write_clients(path: str | os.PathLike[str], source: ClusterConfig, target: ClusterConfig) -> Path:
    """Write the client config file with owner-only permissions."""
    file = Path(path)
    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(clients_json(source, target))
    os.chmod(file, 0o600)
    return file
