"""Connector secrets kept out of the run's state (docs/DESIGN.md §10).

A connector's snapshot holds its config with each literal secret replaced by `MARKER` and the
names of those keys. A key is a secret when the plugin declares it a PASSWORD (asked of the
source worker) or when its name says so (`...password`, `...secret...`, `...token`, `...api.key`,
`...sasl.jaas.config`, ...). A value that is a config provider reference (`${file:...}`,
`${vault:...}`) holds no secret and is kept as it is. When the connector is created on the
target, the literal values are read again from the source worker, where the connector exists,
stopped, for the whole run, after checking that none of its other keys changed since the
snapshot. No value of a secret key appears in an error or the log."""
from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from kmigrate.errors import ConfigError, ConnectError, ConnectorStateError
from kmigrate.kafka.connect import ConnectClient

log = logging.getLogger(__name__)

MARKER = "[secret: read again from the source Connect worker]"
_SECRET_NAME = re.compile(r"password|passwd|secret|token|credential|api[._-]?key|private[._-]?key|"
                          r"access[._-]?key|sasl\.jaas\.config", re.IGNORECASE)
_NOT_SECRET_NAME = re.compile(r"(^|\.)(key|value|header)\.converter$|\.location$|\.type$|\.file$|\.path$",
                              re.IGNORECASE)
_PROVIDER_REFERENCE = re.compile(r"^\$\{[A-Za-z0-9_.-]+:[^}]*\}$")


def secret_by_name(key: str) -> bool:
    return bool(_SECRET_NAME.search(key)) and not _NOT_SECRET_NAME.search(key)


def secret_keys(connect: ConnectClient | None, name: str, config: Mapping[str, str]) -> list[str]:
    """The keys of `config` holding a literal secret: the plugin's PASSWORD keys (when the worker
    can validate the config) and the keys whose name says so, less config provider references."""
    declared: set[str] = set()
    if connect is not None and "connector.class" in config:
        try:
            declared = connect.password_keys(config)
        except ConnectError as exc:
            log.info("connector %s: the source worker did not validate its config (%s); its secret keys are "
                     "told by their names", name, type(exc).__name__)
    return sorted(k for k, v in config.items()
                  if (k in declared or secret_by_name(k)) and not _PROVIDER_REFERENCE.match(str(v or "")))


def redacted(connect: ConnectClient | None, name: str, config: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The config as the snapshot keeps it, and the names of the keys replaced by MARKER."""
    keys = secret_keys(connect, name, config)
    return {k: (MARKER if k in keys else v) for k, v in config.items()}, keys


def restored(entry: Mapping[str, Any], name: str, source_connect: ConnectClient | None) -> dict[str, str]:
    """The snapshot entry's config with its secrets read again from the source worker. Refuses,
    naming the keys (never their values), when the source worker cannot be asked or the
    connector's other keys differ from the snapshot's."""
    config = dict(entry["config"])
    keys = list(entry.get("secret_keys", []))
    if not keys:
        return config
    if source_connect is None:
        raise ConfigError(f"connector {name!r} has secrets ({', '.join(keys)}) that the run does not store; they are "
                          "read again from the source Connect cluster, so give the run its Connect connection "
                          "(nothing was created)")
    live = source_connect.config(name)
    changed = sorted(k for k in set(live) | set(config)
                     if k not in keys and k != "name" and live.get(k) != config.get(k))
    changed += sorted(k for k in keys if k not in live)
    if changed:
        raise ConnectorStateError(
            f"connector {name!r} on the source Connect cluster ({source_connect.url}) changed since the snapshot "
            f"(keys: {', '.join(changed)}); its secrets cannot be taken from a config that differs. Put the config "
            "back, or run the rollback DAG and start a new run (nothing was created)", connector=name)
    config.update({k: live[k] for k in keys})
    return config
