"""Which keys of a connector's config hold a literal secret, told by name (the plugin's own PASSWORD
declarations are asked of a real worker in tests/integration/test_connector_secrets.py)."""
from __future__ import annotations

import pytest
from kmigrate.run.connector_secrets import MARKER, redacted, secret_by_name


@pytest.mark.parametrize("key", ["connection.password", "ssl.key.password", "aws.secret.access.key", "api.key",
                                 "x.api_key", "oauth.token", "sasl.jaas.config", "producer.override.sasl.jaas.config",
                                 "gcp.credentials.json", "private.key", "database.PASSWORD"])
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
