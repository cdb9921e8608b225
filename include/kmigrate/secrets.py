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
`;token=...` as a Spark Connect URL's) or a signature's (`sig=`, `signature=`, `X-Amz-Signature=`: a
pre-signed URL's or an Azure SAS's), or when it lists HTTP headers (`Authorization: Bearer ...`, as an
HTTP sink connector's `http.headers`) of which one is Authorization, Proxy-Authorization, Cookie or
has a secret's name (`X-Api-Key`, `X-Auth-Token`). A password typed unencoded with `@` or `/` in it
(`user:p@ss/w@host`) is hidden whole: the userinfo ends at the last `@` followed by a host (a path
holding `@` is then hidden too: more hidden, never less). `redact_url` hides those parts and keeps
the rest."""
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

# scheme://user:  (any scheme, jdbc:sub:// included) and jdbc:oracle:thin:user/ : what a password follows
_USERINFO = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/@:\s;?#]*:")
_ORACLE = re.compile(r":thin:[^/@:\s]+/", re.IGNORECASE)
# what ends a password: @ then a host (name, IPv4 or [IPv6]), its port, then the end, a path, a query or
# another host; the last such @ of the URL (a password typed with @ or / in it is hidden whole)
_AT_HOST = re.compile(r"@(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::[0-9]*)?(?=[/?#;,\s]|$)")
_PORT_PATH = re.compile(r"[0-9]+/")  # host:8083/a@b: a port and a path, not user:password
# ?name=value, &name=value, ;name=value: the value when the name is a secret's or a signature's
_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.-]+)=)(?P<secret>[^&;#\s]*)")
_SIGNATURE = re.compile(r"^(sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|x-goog-signature|"
                        r"x-goog-credential)$", re.IGNORECASE)
# Name: value in a list of HTTP headers (at the start, or after | , ; or a line break): the value when the
# header carries credentials
_HEADER = re.compile(r"(?P<head>(?:^|[|,;\r\n])\s*(?P<name>[A-Za-z][A-Za-z0-9_-]*)\s*:[ \t]*)(?P<secret>[^|,;\r\n]*)")
_CREDENTIAL_HEADER = re.compile(r"^(authorization|proxy-authorization|cookie|set-cookie)$", re.IGNORECASE)


def _secret_param(name: str) -> bool:
    return secret_name(name) or bool(_SIGNATURE.match(name))


def _secret_header(name: str) -> bool:
    return bool(_CREDENTIAL_HEADER.match(name)) or secret_name(name)


def secret_name(key: str) -> bool:
    """Whether a setting of this name holds a secret (see the module's rule)."""
    return bool(_SECRET_NAME.search(key)) and not _NOT_SECRET_NAME.search(key)


def secret_setting(key: str) -> bool:
    """Whether a client setting of this name holds a secret: one of SECRET_KEYS, or a secret's name."""
    return key in SECRET_KEYS or secret_name(key)


def provider_reference(value: object) -> bool:
    """Whether `value` is a config provider reference (`${provider:path:key}`), no secret itself."""
    return isinstance(value, str) and bool(_PROVIDER_REFERENCE.match(value))


def _password_spans(value: str) -> list[tuple[int, int]]:
    """Where the passwords of `value`'s URLs lie: after `scheme://user:` (or Oracle's `:thin:user/`), up
    to the last @ followed by a host before the next space or URL."""
    spans = []
    for head in (_USERINFO, _ORACLE):
        for m in head.finditer(value):
            begin = m.end()
            scope = len(value)
            for stop in (_USERINFO.search(value, begin), re.compile(r"\s").search(value, begin)):
                scope = min(scope, stop.start()) if stop else scope
            last = None
            for last in _AT_HOST.finditer(value, begin, scope):
                pass
            if last is not None and last.start() > begin and not _PORT_PATH.match(value, begin, last.start()):
                spans.append((begin, last.start()))
    return sorted(spans)


def _hidden_spans(value: str) -> list[tuple[int, int]]:
    """Where `value`'s secrets lie (see the module's rule), in order, not overlapping."""
    spans = _password_spans(value)
    spans += [m.span("secret") for m in _PARAM.finditer(value) if m["secret"] and _secret_param(m["name"])]
    spans += [m.span("secret") for m in _HEADER.finditer(value) if m["secret"].strip() and _secret_header(m["name"])]
    out: list[tuple[int, int]] = []
    for begin, end in sorted(spans):
        if out and begin < out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((begin, end))
    return out


def redact_url(value: str) -> str:
    """`value` with the password of a URL's userinfo, the secret parameters' values and the
    credential headers' values replaced by HIDDEN; the value itself when it holds none."""
    if "=" not in value and "@" not in value and ":" not in value:
        return value
    shown, at = [], 0
    for begin, end in _hidden_spans(value):
        shown += [value[at:begin], HIDDEN]
        at = end
    return "".join(shown) + value[at:]


def url_secrets(value: str) -> list[str]:
    """The pieces of `value` that redact_url hides (for a log masker that hides them anywhere)."""
    return [value[begin:end] for begin, end in _hidden_spans(value)]


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """`url` without its userinfo, and the user and password it held (None: none), the password
    ending where `redact_url` ends it (typed with @ or / in it: whole)."""
    head = _USERINFO.match(url)
    spans = _password_spans(url)
    if head is not None and spans and spans[0][0] == head.end():
        scheme, user = head[0][:-1].split("://", 1)
        return f"{scheme}://{url[spans[0][1] + 1:]}", user, url[head.end():spans[0][1]]
    scheme, sep, rest = url.partition("://")
    authority = rest.split("/", 1)[0]
    if sep and "@" in authority:  # user@host: a user, no password
        user = authority.rsplit("@", 1)[0]
        return f"{scheme}://{rest[len(user) + 1:]}", user, None
    return url, None, None


def url_has_secret(value: object) -> bool:
    return isinstance(value, str) and redact_url(value) != value


def redact_setting(key: str, value: object) -> object:
    """The value as a log or a repr may show it: HIDDEN for a secret's name, a URL without its
    credentials, anything else as it is."""
    if secret_name(key) and not provider_reference(value):
        return HIDDEN
    return redact_url(value) if isinstance(value, str) else value
