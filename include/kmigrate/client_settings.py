"""The checks of a cluster's librdkafka settings that name what is wrong before (or instead of) a bare
KafkaException, FileNotFoundError or ValueError: bootstrap servers each host:port, the TLS files there
and readable on the host that builds the client, and librdkafka's refusal of a setting turned into
a ConfigError naming the cluster, the setting and the way out."""
from __future__ import annotations

import errno
import os
import re
import select
import socket
import time
from collections.abc import Collection, Mapping
from typing import Any

from kmigrate.errors import ConfigError

WHERE = "the Kafka connection's extra JSON (Airflow) or the clients file"
REFERENCE = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
# settings naming a file (or, for ssl.ca.location, a folder) the client reads when it is built
FILE_KEYS = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
             "ssl.crl.location", "ssl.truststore.location", "sasl.kerberos.keytab")
_SERVER = re.compile(r"^(?:[A-Za-z_]+://)?(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):(\d{1,5})$")
_UNKNOWN = re.compile(r'No such configuration property: "([^"]+)"')
_INVALID = re.compile(r'Invalid value (?:"[^"]*" )?for configuration property "([^"]+)"')
# librdkafka names some settings by their other name when it refuses a value
ALIASES = {"queue.buffering.max.ms": "linger.ms", "request.required.acks": "acks", "compression.codec":
           "compression.type", "sasl.mechanisms": "sasl.mechanism"}


def addresses(name: str, servers: Any) -> list[tuple[str, int]]:
    """(host, port) of each entry of `bootstrap.servers` ("host:port,host:port", each maybe with a
    "PROTOCOL://" prefix or an [IPv6] host); ConfigError naming the cluster and the entry otherwise."""
    if not isinstance(servers, str):
        raise ConfigError(f"{name} cluster: 'bootstrap.servers' is {type(servers).__name__} {servers!r}; write it as "
                          f"one string of host:port entries separated by commas, e.g. \"broker1:9092,broker2:9092\", "
                          f"in {WHERE}")
    out = []
    for entry in [e for e in re.split(r"[,\s]+", servers) if e] or [servers]:
        match = _SERVER.match(entry)
        if not match or not 0 < int(match[2]) < 65536:
            bare = entry.split("://")[-1].strip()
            hint = f"e.g. {bare}:9092" if bare and ":" not in bare else "e.g. broker1:9092"
            raise ConfigError(f"{name} cluster: bootstrap.servers entry {entry!r} (of {servers!r}) is not host:port "
                              f"with a numeric port; write each server as host:port ({hint}), separated by commas, "
                              f"in {WHERE}")
        out.append((match[1].strip("[]"), int(match[2])))
    return out


def listening(name: str, servers: Any, timeout_s: float) -> bool | None:
    """Whether something listens at `servers` (bootstrap.servers), every address of each tried at
    once: True as soon as one accepts a TCP connection within `timeout_s`, False when every one
    refuses it (nothing listens there: its brokers killed, known at once where a client would try
    again until its timeout), None otherwise (a name unresolved, an address unreachable or slow:
    only a request can tell)."""
    socks: list[socket.socket] = []
    waiting: list[socket.socket] = []
    refused: list[bool] = []  # an address or name given up on: whether it refused
    try:
        for host, port in addresses(name, servers):
            try:
                found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError:
                refused.append(False)
                continue
            for family, kind, proto, _, address in found:
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError:  # an address family this host does not have
                    refused.append(False)
                    continue
                socks.append(sock)
                sock.setblocking(False)
                code = sock.connect_ex(address)
                if code == 0:
                    return True
                if code in (errno.EINPROGRESS, errno.EAGAIN):
                    waiting.append(sock)
                else:
                    refused.append(code == errno.ECONNREFUSED)
        deadline = time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline:
            poller = select.poll()  # not select: it refuses descriptors numbered 1024 or more
            for sock in waiting:
                poller.register(sock, select.POLLOUT)
            timeout_ms = max(0, int((deadline - time.monotonic()) * 1000))
            events = {fd for fd, _ in poller.poll(timeout_ms)}
            ready = [sock for sock in waiting if sock.fileno() in events]
            for sock in ready:
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code == 0:
                    return True
                waiting.remove(sock)
                refused.append(code == errno.ECONNREFUSED)
        return False if not waiting and all(refused) else None
    finally:
        for sock in socks:
            sock.close()


def check_files(name: str, settings: Mapping[str, Any]) -> None:
    """Every TLS or keytab file the settings name exists and is readable on this host (the one
    that builds the client: an Airflow worker, a Spark executor); ConfigError naming it otherwise."""
    for key in FILE_KEYS:
        path = settings.get(key)
        if not path or (key == "ssl.ca.location" and path == "probe"):
            continue
        path = str(path)
        if not os.path.exists(path):
            problem = "does not exist"
        elif not os.access(path, os.R_OK | (os.X_OK if os.path.isdir(path) else 0)):
            problem = "is not readable by this process (user id %d)" % os.getuid()
        else:
            continue
        raise ConfigError(f"{name} cluster: {key} {path!r} {problem} on host {socket.gethostname()}; put the file "
                          f"there (every host that runs a client of the cluster needs it: Airflow workers, Spark "
                          f"executors) or fix {key} in {WHERE}")


def refused(name: str, config: Mapping[str, Any], exc: Exception, secret: Collection[str] = ()) -> ConfigError:
    """The ConfigError for librdkafka's refusal (a KafkaException) to build a client from `config`;
    the values of the `secret` settings are not shown."""
    error = exc.args[0] if exc.args else exc
    text = error.str() if hasattr(error, "str") else str(error)
    unknown, invalid = _UNKNOWN.search(text), _INVALID.search(text)
    if unknown:
        key = unknown[1]
        return ConfigError(f"{name}: client setting {key!r} is not a librdkafka setting ({text}); fix its spelling "
                           f"or remove it in {WHERE} (the settings: {REFERENCE})")
    if invalid:
        key = next((k for k in (invalid[1], ALIASES.get(invalid[1])) if k in config), invalid[1])
        value = ("(secret, not shown)" if key in secret else repr(config[key])) if key in config else "(not shown)"
        what = f"client setting {key!r} has an invalid value {value}"
        return ConfigError(f"{name}: {what}; fix it in {WHERE} (the settings and their values: {REFERENCE})")
    return ConfigError(f"{name}: librdkafka refused the client settings: {text}; fix them in {WHERE} "
                       f"(the settings: {REFERENCE})")
