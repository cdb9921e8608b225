"""How a raw connection reaches a cluster's brokers: the TLS context and SASL credentials read from
the cluster's librdkafka settings, or `Unsupported` naming the setting the raw path cannot honour
(GSSAPI, OAUTHBEARER, keystores or PEM strings in the config), in which case callers take
librdkafka's record path."""
from __future__ import annotations

import dataclasses
import logging
import ssl
from pathlib import Path

from kmigrate import client_settings
from kmigrate.config import ClusterConfig
from kmigrate.errors import KmigrateError

log = logging.getLogger(__name__)

SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# librdkafka settings the Transport reads; any other ssl.* or sasl.* setting sends the client to librdkafka
_SSL_KEYS = {"ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
             "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification", "ssl.cipher.suites"}
_SASL_KEYS = {"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password"}

class AuthenticationFailed(KmigrateError):
    """The broker refused the connection's TLS handshake or SASL authentication."""


class Unsupported(Exception):
    """The cluster's settings ask for something the raw connection does not speak."""


@dataclasses.dataclass(frozen=True)
class Transport:
    """How a raw connection reaches a cluster's brokers: TLS (an ssl context) and SASL (mechanism,
    user, password), from the same librdkafka settings every other client of the run uses."""

    tls: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = dataclasses.field(default="", repr=False)

    @classmethod
    def of(cls, cluster: ClusterConfig) -> Transport:
        """The cluster's transport, or Unsupported naming the setting the raw path cannot honour."""
        settings = cluster.settings
        protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
        if protocol not in ("PLAINTEXT", "SSL", "SASL_SSL", "SASL_PLAINTEXT"):
            raise Unsupported(f"security.protocol {protocol}")
        tls = protocol in ("SSL", "SASL_SSL")
        unknown = sorted(k for k in settings if (k.startswith("ssl.") and k not in _SSL_KEYS and tls)
                         or (k.startswith("sasl.") and k not in _SASL_KEYS and protocol.startswith("SASL")))
        if unknown:
            raise Unsupported(f"{', '.join(unknown)}")
        mechanism = None
        if protocol.startswith("SASL"):
            mechanism = str(settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))).upper()
            if mechanism not in SASL_MECHANISMS:
                raise Unsupported(f"SASL mechanism {mechanism}")
        if tls:
            client_settings.check_files(cluster.name, settings)  # a ConfigError naming a missing file
        return cls(_ssl_context(settings) if tls else None, mechanism, str(settings.get("sasl.username", "")),
                   str(settings.get("sasl.password", "")))

    @property
    def name(self) -> str:
        return {(False, False): "PLAINTEXT", (True, False): "SSL", (False, True): f"SASL_PLAINTEXT/{self.mechanism}",
                (True, True): f"SASL_SSL/{self.mechanism}"}[(self.tls is not None, self.mechanism is not None)]


def _ssl_context(settings) -> ssl.SSLContext:  # noqa: ANN001 - a cluster's settings mapping
    ca = settings.get("ssl.ca.location")
    ca = None if ca == "probe" else ca  # librdkafka's "probe": the system's CA store, as here by default
    if ca and Path(ca).is_dir():
        context = ssl.create_default_context(capath=ca)
    else:
        context = ssl.create_default_context(cafile=ca or None)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if str(settings.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if str(settings.get("enable.ssl.certificate.verification", "true")).lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if settings.get("ssl.cipher.suites"):
        context.set_ciphers(str(settings["ssl.cipher.suites"]))
    if settings.get("ssl.certificate.location"):
        context.load_cert_chain(settings["ssl.certificate.location"], settings.get("ssl.key.location"),
                                password=settings.get("ssl.key.password"))
    return context


_noted: set[tuple[str, str, str]] = set()


def raw_capable(cluster: ClusterConfig, what: str = "whole-batch copy",
                instead: str = "the record path (librdkafka) copies instead") -> bool:
    """Whether the raw connection can reach `cluster`; when it cannot, says why in the log once per
    cluster, setting and use (`what`, and what the caller does `instead`)."""
    try:
        Transport.of(cluster)
        return True
    except Unsupported as exc:
        if (cluster.name, what, str(exc)) not in _noted:
            _noted.add((cluster.name, what, str(exc)))
            log.info("%s: %s is not available with %s; %s", cluster.name, what, exc, instead)
        return False
