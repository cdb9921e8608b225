"""The one rule of which settings hold a secret (kmigrate.secrets), as the Kafka client configs'
repr and the connector snapshots use it."""
from __future__ import annotations

import pytest
from kmigrate.config import ClusterConfig, redact
from kmigrate.secrets import HIDDEN, redact_setting, redact_url, secret_name, url_has_secret, url_secrets


@pytest.mark.parametrize("key", [
    "sasl.password", "ssl.key.password", "ssl.keystore.password", "ssl.truststore.password", "connection.password",
    "database.pwd", "db.passwd", "ssl.key.passphrase", "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.client.secret", "aws.secret.access.key", "azure.sas.token", "bearer.auth.token",
    "gcp.credentials.json", "aws.credentials", "value.converter.basic.auth.user.info",
    "key.converter.schema.registry.basic.auth.user.info", "ssl.keystore.key", "ssl.key.pem", "ssl_key",
    "private.key", "s3.sse.customer.key", "api.key", "x.api_key", "datadog.apikey", "aws.access.key.id",
    "sasl.jaas.config", "producer.override.sasl.jaas.config", "sasl.oauthbearer.config",
    "azure.eventhub.connection.string", "http.headers.authorization", "database.PASSWORD"])
def test_secret_names(key):
    assert secret_name(key)


@pytest.mark.parametrize("key", [
    "bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.username", "sasl.oauthbearer.client.id",
    "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.certificate.pem", "ssl.ca.pem",
    "ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.location", "sasl.kerberos.keytab",
    "sasl.oauthbearer.token.endpoint.url", "sasl.oauthbearer.assertion.private.key.file", "credentials.file",
    "key.converter", "value.converter", "header.converter", "key.ignore", "topic", "file", "tasks.max",
    "transforms.mask.fields", "connection.url", "connection.user", "ssl.endpoint.identification.algorithm"])
def test_not_secret_names(key):
    assert not secret_name(key)


@pytest.mark.parametrize(("url", "shown"), [
    ("jdbc:postgresql://app:pa55@db:5432/shop", f"jdbc:postgresql://app:{HIDDEN}@db:5432/shop"),
    ("mongodb+srv://u:p%40ss@cluster0.example.net/?retryWrites=true",
     f"mongodb+srv://u:{HIDDEN}@cluster0.example.net/?retryWrites=true"),
    ("jdbc:postgresql://db/shop?user=app&password=pa55&ssl=true",
     f"jdbc:postgresql://db/shop?user=app&password={HIDDEN}&ssl=true"),
    ("jdbc:sqlserver://db:1433;databaseName=shop;user=app;password=pa55",
     f"jdbc:sqlserver://db:1433;databaseName=shop;user=app;password={HIDDEN}"),
    ("jdbc:oracle:thin:app/pa55@db:1521/ORCL", f"jdbc:oracle:thin:app/{HIDDEN}@db:1521/ORCL"),
    ("sc://spark:15002/;token=abc123;use_ssl=true", f"sc://spark:15002/;token={HIDDEN};use_ssl=true"),
    ("https://h/x?api_key=k1&page=2", f"https://h/x?api_key={HIDDEN}&page=2"),
])
def test_url_credentials_are_hidden_and_the_rest_kept(url, shown):
    assert redact_url(url) == shown and url_has_secret(url)


@pytest.mark.parametrize("value", ["jdbc:postgresql://db:5432/shop", "http://user@host:8080/p", "b1:9092,b2:9092",
                                   "sc://localhost:15002", "sc://h:1/;user_id=me", "a=b", "x@y", "", "${file:/s:k}"])
def test_values_without_credentials_are_kept(value):
    assert redact_url(value) == value and not url_has_secret(value)


def test_url_secrets_are_the_hidden_pieces():
    assert url_secrets("sc://h:1/;token=abc123;use_ssl=true") == ["abc123"]
    assert url_secrets("jdbc:postgresql://app:pa55@db/x?password=pa66&user=app") == ["pa55", "pa66"]
    assert url_secrets("sc://localhost:15002") == []


def test_redact_setting():
    assert redact_setting("connection.password", "pw") == HIDDEN
    assert redact_setting("connection.password", "${vault:db:pw}") == "${vault:db:pw}"
    assert redact_setting("connection.url", "jdbc:mysql://a:pw@db/x") == f"jdbc:mysql://a:{HIDDEN}@db/x"
    assert redact_setting("tasks.max", 3) == 3


def test_cluster_config_repr_shows_no_secret():
    secrets = {"sasl.password": "S-one", "sasl.oauthbearer.config": "principal=admin extension_k=S-two",
               "sasl.oauthbearer.client.secret": "S-three", "ssl.key.password": "S-four",
               "ssl.keystore.password": "S-five", "ssl.key.pem": "-----BEGIN PRIVATE KEY-----S-six",
               "ssl.keystore.pem": "S-seven", "ssl_key": "S-eight", "ssl.truststore.password": "S-nine",
               "sasl.jaas.config": 'password="S-ten"'}
    cfg = ClusterConfig.from_bootstrap("x", "b:9092", **secrets, **{
        "sasl.oauthbearer.token.endpoint.url": "https://idp/token?client_secret=S-eleven", "ssl.ca.location": "/ca.pem"})
    shown = repr(cfg)
    assert "S-" not in shown, shown
    assert all(f"'{k}': '{HIDDEN}'" in shown for k in secrets)
    assert "'b:9092'" in shown and "'/ca.pem'" in shown and f"https://idp/token?client_secret={HIDDEN}" in shown
    assert redact(cfg.settings)["bootstrap.servers"] == "b:9092"


@pytest.mark.parametrize(("value", "shown"), [
    # a signature or token in a query string: a pre-signed URL's, an Azure SAS's, an OAuth access token's
    ("https://acct.blob.core.windows.net/c/b?sv=2024&sig=S1gn%3D&se=2027", f"https://acct.blob.core.windows.net/c/b?sv=2024&sig={HIDDEN}&se=2027"),
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AK&X-Amz-Signature=ab12",
     f"https://b.s3.amazonaws.com/k?X-Amz-Credential={HIDDEN}&X-Amz-Signature={HIDDEN}"),
    ("https://h/x?signature=abc&page=2", f"https://h/x?signature={HIDDEN}&page=2"),
    ("https://h/x?access_token=abc", f"https://h/x?access_token={HIDDEN}"),
    ("https://h/x?token=abc", f"https://h/x?token={HIDDEN}"),
    ("https://h/x?password=abc", f"https://h/x?password={HIDDEN}"),
    # a password typed unencoded with @ or / in it: hidden whole, the host kept
    ("http://user:p@ss/w@connect:8083/x", f"http://user:{HIDDEN}@connect:8083/x"),
    ("jdbc:mysql://app:a@b@db:3306/shop", f"jdbc:mysql://app:{HIDDEN}@db:3306/shop"),
    ("jdbc:oracle:thin:app/p@s/s@db:1521/ORCL", f"jdbc:oracle:thin:app/{HIDDEN}@db:1521/ORCL"),
    ("mongodb://u:pw@h1:27017,h2:27017/db", f"mongodb://u:{HIDDEN}@h1:27017,h2:27017/db"),
    # HTTP headers in one value, as an HTTP sink connector's http.headers
    ("Authorization: Bearer abc.def, X-Other: 1", f"Authorization: {HIDDEN}, X-Other: 1"),
    ("Accept:application/json|Proxy-Authorization:Basic dTpw|X-Api-Key: k1",
     f"Accept:application/json|Proxy-Authorization:{HIDDEN}|X-Api-Key: {HIDDEN}"),
])
def test_signatures_passwords_with_at_or_slash_and_credential_headers_are_hidden(value, shown):
    assert redact_url(value) == shown and url_has_secret(value)
    assert all(piece not in redact_url(value) for piece in url_secrets(value))


@pytest.mark.parametrize("value", ["http://host:8083/connectors/a@b", "https://h:443/x?email=a@b.com",
                                   "Accept: application/json, X-Request-Id: 7", "jdbc:postgresql://db:5432/shop"])
def test_values_like_those_but_without_credentials_are_kept(value):
    assert redact_url(value) == value


def test_a_connector_config_with_an_authorization_header_is_kept_without_it():
    from kmigrate.run.connectors.secrets import redacted

    stored, keys = redacted(None, "http-sink", {"connector.class": "x.HttpSink", "http.headers":
                                                "Content-Type: application/json|Authorization: Bearer s3cr3t"})
    assert keys == ["http.headers"] and "s3cr3t" not in str(stored)
    assert stored["http.headers"] == f"Content-Type: application/json|Authorization: {HIDDEN}"


def test_a_connect_url_with_credentials_is_shown_without_them():
    from kmigrate.kafka.connect import ConnectClient
    from kmigrate.secrets import split_userinfo

    assert split_userinfo("http://u:p@ss/w@connect:8083/x") == ("http://connect:8083/x", "u", "p@ss/w")
    assert split_userinfo("http://connect:8083") == ("http://connect:8083", None, None)
    client = ConnectClient("https://admin:p%40ss@connect:8083/")
    assert client.url == "https://connect:8083" and client._session.auth == ("admin", "p@ss")
    assert "p%40ss" not in repr(client)
