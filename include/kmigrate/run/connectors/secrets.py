"""Connector secrets kept out of the run's state (docs/DESIGN.md §10).

A connector's snapshot holds its config with each literal secret left out, and the names of the
keys it left out (`secret_keys`). A key is a secret when the plugin declares it a PASSWORD (asked of
the source worker) or when its name says so (`kmigrate.secrets.secret_name`: `...password`, `pwd`,
`...passphrase`, `...secret...`, `...token`, `basic.auth.user.info`, `ssl.keystore.key`,
`sasl.jaas.config`, ...): its value is replaced by `MARKER`. A value that is a URL holding
credentials (`jdbc:postgresql://user:pw@db/x`, `...?password=...`) keeps its URL with the
credentials replaced by `kmigrate.secrets.HIDDEN`. A value that is a config provider reference
(`${file:...}`, `${vault:...}`) holds no secret and is kept as it is. When the connector is created
on the target, the literal values are read again from the source worker, where the connector
exists, stopped, for the whole run, after checking that none of its other keys changed since the
snapshot (nor the visible part of a URL). No value of a secret key appears in an error or the log."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from kmigrate.errors import ConfigError, ConnectError, ConnectorStateError
from kmigrate.kafka.connect import ConnectClient
from kmigrate.secrets import provider_reference, redact_url, secret_name

log = logging.getLogger(__name__)

MARKER = "[secret: read again from the source Connect worker]"


def secret_by_name(key: str) -> bool:
    return secret_name(key)


def secret_keys(connect: ConnectClient | None, name: str, config: Mapping[str, str]) -> list[str]:
    """The keys of `config` holding a literal secret: the plugin's PASSWORD keys (when the worker
    can validate the config), the keys whose name says so and those whose value is a URL with
    credentials, less config provider references."""
    return sorted(_classified(connect, name, config))


def redacted(connect: ConnectClient | None, name: str, config: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """The config as the snapshot keeps it, and the names of the keys it left a secret out of: a
    URL's credentials only (replaced by HIDDEN), or the whole value (replaced by MARKER)."""
    kinds = _classified(connect, name, config)
    stored = {k: (v if k not in kinds else redact_url(v) if kinds[k] == "url" else MARKER) for k, v in config.items()}
    return stored, sorted(kinds)


def _classified(connect: ConnectClient | None, name: str, config: Mapping[str, str]) -> dict[str, str]:
    """Each secret key of `config`: "value" (a secret as a whole) or "url" (a URL with credentials)."""
    declared: set[str] = set()
    if connect is not None and "connector.class" in config:
        try:
            declared = connect.password_keys(config)
        except ConnectError as exc:
            log.info("connector %s: the source worker did not validate its config (%s); its secret keys are "
                     "told by their names", name, type(exc).__name__)
    kinds = {}
    for key, value in config.items():
        if provider_reference(value):
            continue
        if key in declared or secret_name(key):
            kinds[key] = "value"
        elif isinstance(value, str) and redact_url(value) != value:
            kinds[key] = "url"
    return kinds


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
    # a URL kept without its credentials: its visible part must be the live one's
    changed += sorted(k for k in keys if k in live and config.get(k) != MARKER and redact_url(live[k]) != config.get(k))
    if changed:
        raise ConnectorStateError(
            f"connector {name!r} on the source Connect cluster ({source_connect.url}) changed since the snapshot "
            f"(keys: {', '.join(changed)}); its secrets cannot be taken from a config that differs. Put the config "
            "back, or run the rollback DAG and start a new run (nothing was created)", connector=name)
    config.update({k: live[k] for k in keys})
    return config
