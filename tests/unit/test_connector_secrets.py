"""Which keys of a connector's config hold a literal secret, told by name (the plugin's own PASSWORD
declarations are asked of a real worker in tests/integration/test_connector_secrets.py)."""
from __future__ import annotations

import pytest
from kmigrate.errors import ConnectorStateError
from kmigrate.run.connectors.secrets import MARKER, redacted, restored, secret_by_name
from kmigrate.secrets import HIDDEN


@pytest.mark.parametrize("key", ["connection.password", "ssl.key.password", "aws.secret.access.key", "api.key",
                                 "x.api_key", "oauth.token", "sasl.jaas.config", "producer.override.sasl.jaas.config",
                                 "gcp.credentials.json", "private.key", "database.PASSWORD",
                                 "value.converter.basic.auth.user.info", "ssl.keystore.key", "ssl.key.passphrase",
                                 "database.pwd", "bearer.auth.token", "x.apikey"])
def test_secret_names(key):
    assert secret_by_name(key)


@pytest.mark.parametrize("key", ["key.converter", "value.converter", "header.converter", "topic", "file",
                                 "ssl.keystore.location", "ssl.keystore.type", "credentials.file", "tasks.max",
                                 "transforms.mask.fields"])
def test_not_secret_names(key):
    assert not secret_by_name(key)


def test_provider_references_are_kept():
    stored, keys = redacted(None, "c", {"db.password": "${file:/etc/secrets.properties:db}", "api.token": "abc",
                                        "topic": "t"})
    assert keys == ["api.token"]
    assert stored == {"db.password": "${file:/etc/secrets.properties:db}", "api.token": MARKER, "topic": "t"}


def test_url_credentials_are_left_out_and_the_rest_of_the_url_kept():
    config = {"connector.class": "io.confluent.connect.jdbc.JdbcSinkConnector", "topics": "t",
              "connection.url": "jdbc:postgresql://app:pa55@db:5432/shop",
              "connection.uri": "mongodb://db/x?authSource=admin&password=pa66",
              "value.converter.basic.auth.user.info": "sr-user:pa77", "value.converter": "io.x.AvroConverter",
              "value.converter.schema.registry.url": "https://registry:8081"}
    stored, keys = redacted(None, "c", config)
    assert keys == ["connection.uri", "connection.url", "value.converter.basic.auth.user.info"]
    assert stored["connection.url"] == f"jdbc:postgresql://app:{HIDDEN}@db:5432/shop"
    assert stored["connection.uri"] == f"mongodb://db/x?authSource=admin&password={HIDDEN}"
    assert stored["value.converter.basic.auth.user.info"] == MARKER
    assert stored["value.converter.schema.registry.url"] == "https://registry:8081"
    assert not [pw for pw in ("pa55", "pa66", "pa77") if pw in repr(stored)]


class Worker:
    """A source worker's reply to GET /connectors/{name}/config (pure logic: no REST here)."""
    url = "https://source:8083"

    def __init__(self, config):
        self._config = config

    def config(self, name):
        return dict(self._config, name=name)


def test_restored_reads_url_credentials_again_and_refuses_a_url_that_changed():
    config = {"connection.url": "jdbc:postgresql://app:pa55@db:5432/shop", "connection.password": "pa88", "topics": "t"}
    stored, keys = redacted(None, "c", config)
    entry = {"config": stored, "secret_keys": keys}
    assert restored(entry, "c", Worker(config)) == config
    moved = {**config, "connection.url": "jdbc:postgresql://app:pa55@other:5432/shop"}
    with pytest.raises(ConnectorStateError, match=r"keys: connection.url\)") as refused:
        restored(entry, "c", Worker(moved))
    assert "pa55" not in str(refused.value) and "pa88" not in str(refused.value)
    # a new password in the same URL is the live one's to give
    rotated = {**config, "connection.url": "jdbc:postgresql://app:new@db:5432/shop"}
    assert restored(entry, "c", Worker(rotated))["connection.url"] == rotated["connection.url"]
