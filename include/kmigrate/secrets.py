"""Which settings hold a secret, told by their name or by the URL in their value: the one rule the
Kafka client configs' repr (kmigrate.config), the connector snapshots (kmigrate.run.connectors.secrets)
and the Spark Connect URL in logs (kmigrate_spark.conf) share. Standard library only.

A name is a secret's when it holds one of these words (any case, `.`, `_` or `-` between words):
- password, passwd, pwd, passphrase, secret: what every client, JDBC driver and keystore calls it
  (`ssl.key.password`, `connection.password`, `aws.secret.access.key`, `...key.passphrase`);
- token, credential(s), authorization: bearer and API tokens, cloud credentials given inline
  (`azure.sas.token`, `gcp.credentials.json`), HTTP authorization headers;
- user.info / userinfo: `basic.auth.user.info` of the schema registry converters is `user:password`;
- api.key / apikey / access.key / private.key, and any last segment that is `key` alone
  (`ssl.keystore.key`, a PEM private key; `s3.sse.customer.key`; `encryption.key`), or `key.pem`
  (librdkafka's `ssl.key.pem`), `ssl_key`: key material;
- sasl.jaas.config, sasl.oauthbearer.config: a JAAS line holds `password="..."`, librdkafka's
  oauthbearer config the unsecured token's principal and extensions;
- connection.string: Azure's `Endpoint=...;SharedAccessKey=...`.
Not a secret's, although they hold such a word, are the names of a file, a class, a type or a URL
(`...location`, `.path`, `.file`, `.type`, `.class`, `.url`, `.uri`, `.endpoint`: they hold no secret
themselves; a URL's credentials are found in its value) and the converters (`key.converter`).
A value naming a config provider (`${file:...}`, `${vault:...}`) holds no secret.

A value holds a secret when it is URL-like and has a password in its userinfo
(`jdbc:postgresql://user:pw@db/x`, `mongodb+srv://u:pw@h`, Oracle's `jdbc:oracle:thin:user/pw@h`) or a
parameter whose name is a secret's (`?password=...`, `;password=...` as SQL Server's JDBC URLs,
`;token=...` as a Spark Connect URL's). `redact_url` hides those parts and keeps the rest."""
from __future__ import annotations

import re

HIDDEN = "***"

# librdkafka's settings that hold a secret (each one's name says so too, but for ssl.keystore.pem,
# which is not librdkafka's and kept for the configs that carry it)
SECRET_KEYS = frozenset({
    "sasl.password", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.config", "ssl.key.password",
    "ssl.keystore.password", "ssl.truststore.password", "ssl.key.pem", "ssl.keystore.pem", "ssl_key",
})

_SECRET_NAME = re.compile(
    r"password|passwd|pwd|passphrase|secret|token|credential|authorization|user[._-]?info|"
    r"api[._-]?key|access[._-]?key|private[._-]?key|(^|[._-])key$|key[._-]pem$|ssl_key|"
    r"sasl[._-]jaas[._-]config|oauthbearer[._-]config|connection[._-]?string", re.IGNORECASE)
_NOT_SECRET_NAME = re.compile(
    r"(^|[._-])(key|value|header)[._-]converter$|[._-](location|path|file|type|class|url|uri|endpoint)$",
    re.IGNORECASE)
_PROVIDER_REFERENCE = re.compile(r"^\$\{[A-Za-z0-9_.-]+:[^}]*\}$")

# scheme://user:password@  (any scheme, jdbc:sub:// included): the password part
_USERINFO = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s;?#]*:)(?P<secret>[^@\s/]*)(?=@)")
# jdbc:oracle:thin:user/password@host
_ORACLE = re.compile(r"(?P<head>:thin:[^/@:\s]+/)(?P<secret>[^@\s]*)(?=@)", re.IGNORECASE)
# ?name=value, &name=value, ;name=value: the value when the name is a secret's
_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.-]+)=)(?P<secret>[^&;#\s]*)")


def secret_name(key: str) -> bool:
    """Whether a setting of this name holds a secret (see the module's rule)."""
    return bool(_SECRET_NAME.search(key)) and not _NOT_SECRET_NAME.search(key)


def secret_setting(key: str) -> bool:
    """Whether a client setting of this name holds a secret: one of SECRET_KEYS, or a secret's name."""
    return key in SECRET_KEYS or secret_name(key)


def provider_reference(value: object) -> bool:
    """Whether `value` is a config provider reference (`${provider:path:key}`), no secret itself."""
    return isinstance(value, str) and bool(_PROVIDER_REFERENCE.match(value))


def redact_url(value: str) -> str:
    """`value` with the password of a URL's userinfo and the secret parameters' values replaced by
    HIDDEN; the value itself when it holds none."""
    if "=" not in value and "@" not in value:
        return value
    value = _USERINFO.sub(lambda m: m["head"] + HIDDEN if m["secret"] else m[0], value)
    value = _ORACLE.sub(lambda m: m["head"] + HIDDEN if m["secret"] else m[0], value)
    return _PARAM.sub(lambda m: m["head"] + HIDDEN if secret_name(m["name"]) and m["secret"] else m[0], value)


def url_secrets(value: str) -> list[str]:
    """The pieces of `value` that redact_url hides (for a log masker that hides them anywhere)."""
    found = [m["secret"] for pattern in (_USERINFO, _ORACLE) for m in pattern.finditer(value) if m["secret"]]
    return found + [m["secret"] for m in _PARAM.finditer(value) if m["secret"] and secret_name(m["name"])]


def url_has_secret(value: object) -> bool:
    return isinstance(value, str) and redact_url(value) != value


def redact_setting(key: str, value: object) -> object:
    """The value as a log or a repr may show it: HIDDEN for a secret's name, a URL without its
    credentials, anything else as it is."""
    if secret_name(key) and not provider_reference(value):
        return HIDDEN
    return redact_url(value) if isinstance(value, str) else value
