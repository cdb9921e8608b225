"""The one Kafka Connect REST client: connector lifecycle and offsets (KIP-875), STOPPED creation (KIP-980).

A connector's name enters a request path as one percent-encoded segment (`connector_path`): `a/../b`
or `x#y` name that connector, never another. Names no Connect cluster can serve by that path are
refused before any request (`check_connector_name`)."""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote

import requests

from kmigrate.errors import ConfigError, ConnectError, ConnectorNotFound, ConnectorStateError, ConnectTimeout, ConnectUnreachable
from kmigrate.secrets import split_userinfo

log = logging.getLogger(__name__)

# what Connect cannot serve under /connectors/{name}: it refuses a name with control characters
# itself, and trims the spaces around one (another name than the one asked for); its Jetty answers
# 400 "Ambiguous URI path separator/encoding" to an encoded / or % in a path (Kafka 4.3, tried), so
# a connector named with one can be created but never read, stopped or deleted by name again
_UNSERVABLE = re.compile(r"[/%\x00-\x1f\x7f-\x9f]")


def check_connector_name(name: object) -> str:
    """`name` when Connect can hold it and serve it by its REST path; ConfigError naming it otherwise."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"connector name {name!r} is empty or not a string; give the connector's name")
    if name != name.strip() or name in (".", "..") or _UNSERVABLE.search(name):
        raise ConfigError(f"connector name {name!r} cannot be served by Kafka Connect's REST API (a name with / or %, "
                          "a control character, spaces around it, or . or ..: Connect refuses or trims it, or its "
                          "web server refuses its path); give the name as Connect lists it (GET /connectors), or "
                          "rename the connector")
    return name


def connector_path(name: str, *rest: str) -> str:
    """/connectors/{name}[/rest...], the name checked and percent-encoded as one path segment."""
    return "/".join(["/connectors", quote(check_connector_name(name), safe=""), *rest])


class ConnectClient:
    """Talks to one Connect cluster's REST API.

    409 answers that mean "rebalance in progress" are retried with backoff until
    `rebalance_timeout_s`; every other failure raises a `ConnectError` subclass naming the
    connector, the HTTP status, Connect's own message and what to do.
    """

    def __init__(
        self,
        url: str,
        *,
        auth: tuple[str, str] | None = None,
        verify: bool | str = True,
        cert: str | tuple[str, str] | None = None,
        request_timeout_s: float = 30.0,
        rebalance_timeout_s: float = 60.0,
        offsets_topic: str | None = None,
    ) -> None:
        url, user, password = split_userinfo(url)
        if user is not None:  # http://user:password@host: basic auth, kept out of the URL every message shows
            auth = auth or (unquote(user), unquote(password or ""))
        self.url = url.rstrip("/")
        self.offsets_topic = offsets_topic  # the worker's offset.storage.topic, when given (old workers)
        self._version: str | None = None
        self.request_timeout_s = request_timeout_s
        self.rebalance_timeout_s = rebalance_timeout_s
        self._session = requests.Session()
        self._session.auth = auth
        self._session.verify = verify
        self._session.cert = cert
        self._session.headers.update({"Accept": "application/json", "Content-Type": "application/json"})

    def __repr__(self) -> str:
        return f"ConnectClient({self.url!r})"

    # ------------------------------------------------------------------ transport

    def _request(self, method: str, path: str, *, connector: str | None = None, body: Any = None) -> Any:
        deadline = time.monotonic() + self.rebalance_timeout_s
        backoff_s = 0.25
        while True:
            try:
                # verify given per request: a session's own is overridden by $REQUESTS_CA_BUNDLE
                resp = self._session.request(method, self.url + path, json=body, timeout=self.request_timeout_s,
                                             verify=self._session.verify)
            except requests.exceptions.SSLError as exc:
                raise ConnectUnreachable(
                    f"Kafka Connect at {self.url}: the TLS handshake failed ({exc.__context__ or exc}); check the "
                    "connection's extra 'verify' (the CA file that signed the worker's certificate) and 'cert'",
                    connector=connector,
                ) from exc
            except requests.ConnectionError as exc:
                raise ConnectUnreachable(
                    f"Kafka Connect at {self.url} is unreachable ({type(exc).__name__}); check that the worker "
                    "is running and the URL in the connection is right",
                    connector=connector,
                ) from exc
            except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
                raise ConnectUnreachable(  # a worker killed while it answered
                    f"Kafka Connect at {self.url} broke off its answer to {method} {path} ({type(exc).__name__}); "
                    "check that the worker is running",
                    connector=connector,
                ) from exc
            except requests.Timeout as exc:
                raise ConnectUnreachable(
                    f"Kafka Connect at {self.url} did not answer {method} {path} within {self.request_timeout_s:.0f}s; "
                    "check the worker's health and load",
                    connector=connector,
                ) from exc
            if resp.status_code < 300:
                return self._json(resp, method, path, connector)
            message = _error_message(resp)
            # 409: a rebalance in progress, a stale config; 500 naming a rebalance: one about to happen
            # (another connector was just created or changed on the cluster): both pass within seconds
            transient = (resp.status_code == 409 and "already exists" not in message) or \
                (resp.status_code == 500 and "rebalance" in message.lower())
            if transient and time.monotonic() < deadline:
                log.info("Connect %s answered %d (%s) to %s %s; retrying in %.2fs", self.url, resp.status_code, message,
                         method, path, backoff_s)
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 5.0)
                continue
            raise _error_for(resp.status_code, message, method, path, self.url, connector)

    def _json(self, resp: requests.Response, method: str, path: str, connector: str | None) -> Any:
        """A 2xx answer's JSON, or ConnectError saying that what answered is not Kafka Connect."""
        if not resp.content:
            return None
        try:
            return resp.json()
        except ValueError:
            raise self._not_connect(method, path, "a body that is not JSON", resp.headers.get("Content-Type"), resp.text,
                                    connector) from None

    def _read(self, method: str, path: str, pick: Any, *, connector: str | None = None, body: Any = None) -> Any:
        """`pick(reply)` of a call's JSON; ConnectError when the reply has not the shape Connect's has."""
        reply = self._request(method, path, connector=connector, body=body)
        try:
            return pick(reply)
        except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
            # its outline, not its values (a connector's config may hold passwords)
            raise self._not_connect(method, path, f"JSON of another shape ({type(exc).__name__}: {exc})",
                                    "application/json", _outline(reply), connector) from exc

    def _not_connect(self, method: str, path: str, what: str, content_type: str | None, text: str,
                     connector: str | None) -> ConnectError:
        preview = " ".join(text.split())[:100]
        return ConnectError(
            f"{self.url} answered {method} {path} with {what}, content type {content_type or 'not given'}: "
            f"{preview!r}. That is not the Kafka Connect REST API: the connection points at something else (a "
            "proxy's login page, a web server, another service's port?); check the Connect connection's host, port, "
            "schema and path", connector=connector)

    # ------------------------------------------------------------------ reads

    def version(self) -> dict[str, Any]:
        return self._read("GET", "/", lambda r: dict(r, version=r["version"]))

    @property
    def worker_version(self) -> str:
        """The worker's version as it reports it ("2.8.2", "7.5.0-ccs"), asked once."""
        if self._version is None:
            self._version = str(self.version().get("version", "?"))
        return self._version

    @property
    def has_offsets_api(self) -> bool:
        """The worker has the STOPPED state and the offsets REST API (KIP-875, Kafka 3.5); older
        workers are paused instead and their offsets read from Kafka (`kmigrate.run.connectors.old_connect`)."""
        release = apache_release(self.worker_version)
        return release is None or release >= (3, 5)

    @property
    def creates_stopped(self) -> bool:
        """The worker creates connectors STOPPED (KIP-980, Kafka 3.7) and alters their offsets (3.6)."""
        release = apache_release(self.worker_version)
        return release is None or release >= (3, 7)

    def connectors(self) -> list[str]:
        return self._read("GET", "/connectors", lambda r: sorted(_list_of(r, str)))

    def plugins(self) -> list[str]:
        return self._read("GET", "/connector-plugins", lambda r: [str(p["class"]) for p in _list_of(r, dict)])

    def config(self, name: str) -> dict[str, str]:
        return self._read("GET", connector_path(name, "config"), lambda r: dict(r.items()), connector=name)

    def info(self, name: str) -> dict[str, Any]:
        """Name, config, tasks and type ("source" or "sink")."""
        return self._read("GET", connector_path(name), lambda r: dict(r, type=r["type"], config=dict(r["config"])),
                          connector=name)

    def status(self, name: str) -> dict[str, Any]:
        return self._read("GET", connector_path(name, "status"), lambda r: dict(
            r, connector=dict(r["connector"], state=r["connector"]["state"]), tasks=list(r["tasks"])), connector=name)

    def state(self, name: str) -> str:
        return str(self.status(name)["connector"]["state"])

    def password_keys(self, config: Mapping[str, str]) -> set[str]:
        """The keys of `config` its plugin declares of type PASSWORD, from PUT
        /connector-plugins/{class}/config/validate (the worker's own view of the plugin)."""
        plugin = config["connector.class"]
        return self._read("PUT", f"/connector-plugins/{quote(str(plugin), safe='')}/config/validate", lambda reply: {
            c["definition"]["name"] for c in reply.get("configs", [])
            if str(c.get("definition", {}).get("type", "")).upper() == "PASSWORD"}, body=dict(config))

    def offsets(self, name: str) -> list[dict[str, Any]]:
        """The connector's offsets as `[{"partition": {...}, "offset": {...}}, ...]` (KIP-875)."""
        return self._read("GET", connector_path(name, "offsets"), lambda r: _list_of(r["offsets"], dict), connector=name)

    # ------------------------------------------------------------------ writes

    def create(self, name: str, config: Mapping[str, str], *, initial_state: str | None = None,
               wait_s: float = 30.0) -> dict[str, Any]:
        """POST /connectors; `initial_state` is RUNNING, PAUSED or STOPPED (KIP-980).

        Connect records a new connector's status asynchronously; this returns once the status
        can be read, so the caller's next status call does not meet a 404."""
        body: dict[str, Any] = {"name": check_connector_name(name), "config": dict(config)}
        if initial_state is not None:
            body["initial_state"] = initial_state
        created = self._request("POST", "/connectors", connector=name, body=body)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.status(name)
                return created
            except ConnectorNotFound:
                if time.monotonic() > deadline:
                    raise ConnectTimeout(
                        f"connector {name!r} was created on {self.url} but has no status after {wait_s:.0f}s; "
                        "check the worker log", connector=name) from None
                time.sleep(0.1)

    def stop(self, name: str, *, wait_s: float = 60.0, wait: bool = True) -> None:
        """PUT /connectors/{c}/stop, then (with `wait`) wait until it is STOPPED with no tasks left."""
        self._request("PUT", connector_path(name, "stop"), connector=name)
        if wait:
            self.wait_stopped(name, wait_s)

    def wait_stopped(self, name: str, wait_s: float = 60.0) -> None:
        self.wait_for(name, is_stopped, "STOPPED with no tasks", wait_s)

    def pause(self, name: str) -> None:
        self._request("PUT", connector_path(name, "pause"), connector=name)

    def resume(self, name: str) -> None:
        self._request("PUT", connector_path(name, "resume"), connector=name)

    def alter_offsets(self, name: str, offsets: list[Mapping[str, Any]]) -> str:
        """PATCH /connectors/{c}/offsets (the connector must be STOPPED); returns Connect's message."""
        return self._read("PATCH", connector_path(name, "offsets"), _message, connector=name,
                          body={"offsets": list(offsets)})

    def reset_offsets(self, name: str) -> str:
        return self._read("DELETE", connector_path(name, "offsets"), _message, connector=name)

    def delete(self, name: str) -> None:
        self._request("DELETE", connector_path(name), connector=name)

    # ------------------------------------------------------------------ waiting

    def wait_for(self, name: str, predicate: Any, what: str, timeout_s: float, poll_s: float = 0.05) -> dict[str, Any]:
        """Poll the connector's status until `predicate(status)` holds; ConnectTimeout after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            current = self.status(name)
            if predicate(current):
                return current
            if time.monotonic() > deadline:
                raise ConnectTimeout(
                    f"connector {name!r} on {self.url} was not {what} after {timeout_s:.0f}s "
                    f"(last status: {current}); check the worker log",
                    connector=name,
                )
            time.sleep(poll_s)


def is_stopped(status: Mapping[str, Any]) -> bool:
    """Whether a connector's status says STOPPED with no task left."""
    return status["connector"]["state"] == "STOPPED" and not status["tasks"]


def apache_release(version: str) -> tuple[int, int] | None:
    """(major, minor) of the Apache Kafka release a worker's version string stands for: "2.8.2" is
    (2, 8); Confluent Platform's "7.5.0-ccs" is Kafka 3.5, "6.2.1-ccs" Kafka 2.8, "8.0.0-ccs" Kafka 4.0.
    None when the string is not understood (then the worker is taken to be new)."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        return None
    major, minor = int(match[1]), int(match[2])
    if major <= 4:
        return major, minor
    return {5: (2, minor), 6: (2, minor + 6), 7: (3, minor), 8: (4, minor)}.get(major)


def _outline(value: Any) -> str:
    """A JSON value's shape: an object's keys, a list's length and first item's shape."""
    if isinstance(value, dict):
        return "an object with keys " + ", ".join(map(str, list(value)[:8])) if value else "an empty object"
    if isinstance(value, list):
        return f"a list of {len(value)}" + (f", the first {_outline(value[0])}" if value else "")
    return "null" if value is None else f"a {type(value).__name__}"


def _message(reply: Any) -> str:
    return str(reply.get("message", "")) if reply else ""


def _list_of(value: Any, kind: type) -> list[Any]:
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise TypeError(f"expected a list of {kind.__name__}")
    return value


def _error_message(resp: requests.Response) -> str:
    try:
        payload = resp.json()
    except ValueError:
        return resp.text.strip()[:500]
    if isinstance(payload, dict) and "message" in payload:
        return str(payload["message"])
    return str(payload)[:500]


def _error_for(status: int, message: str, method: str, path: str, url: str, connector: str | None) -> ConnectError:
    subject = f"connector {connector!r}" if connector else f"{method} {path}"
    if status == 404:
        return ConnectorNotFound(
            f"{subject} not found on Kafka Connect at {url} (404: {message}); check the connector name",
            status=status, connector=connector,
        )
    if status in (400, 409):
        hint = ("it already exists: choose another name or delete it first" if "already exists" in message
                else "bring it into the state the call needs (offsets change only while STOPPED) and retry")
        return ConnectorStateError(
            f"{subject} on Kafka Connect at {url}: {method} {path} refused ({status}: {message}); {hint}",
            status=status, connector=connector,
        )
    if status in (401, 403):
        return ConnectError(
            f"Kafka Connect at {url} refused {method} {path} ({status}: {message}); check the credentials "
            "in the Connect connection",
            status=status, connector=connector,
        )
    return ConnectError(
        f"{subject}: Kafka Connect at {url} failed {method} {path} ({status}: {message}); see the worker log",
        status=status, connector=connector,
    )
