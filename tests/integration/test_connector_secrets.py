"""Connector secrets against the real stack: the run's state never holds a literal secret of a
connector's config; the target's connector gets the value read again from the source worker, and
only while the connector's other keys still equal the snapshot's."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import requests
from kmigrate.errors import ConfigError, ConnectorNotFound, ConnectorStateError
from kmigrate.manifest import Manifest
from kmigrate.run.connectors.secrets import MARKER, redacted
from kmigrate.run.connectors.migrate import migrate_connectors, stop_connectors
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate.secrets import HIDDEN

from tests.support.connect import FILE_SOURCE, copy_run
from tests.support.kafka import create_topic, watermarks
from tests.support.waiting import wait_until


def stopped_source_connector(stack, topic: str, name: str, data: Path, secret: str,
                             **extra: str) -> dict[str, str]:
    data.write_text("".join(f"line {i}\n" for i in range(5)))
    create_topic(stack.source, topic)
    config = {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(data), "topic": topic,
              "x.api.password": secret, "x.vault.token": "${vault:kafka/connect:token}", **extra}
    stack.source_connect.create(name, config)
    wait_until(lambda: watermarks(stack.source, topic)[1] == 5, "5 lines on the source")
    stop_connectors(stack.source_connect, [name])
    return config


def files_holding(root: Path, text: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and text.encode() in p.read_bytes()]


def test_secrets_are_left_out_of_the_state_and_read_again_from_the_source(stack, unique_name, tmp_path,
                                                                           connectors):
    topic, name, secret = unique_name, f"{unique_name}-src", f"pw-{unique_name}"
    connectors += [(stack.source_connect, name), (stack.target_connect, name)]
    config = stopped_source_connector(stack, topic, name, tmp_path / "in.txt", secret)
    state = tmp_path / "state"
    manifest = Manifest(str(state), "run-1")
    snapshot = take_snapshot(manifest, stack.source, topics_include=topic, source_connect=stack.source_connect,
                             connectors=[name])
    entry = snapshot["connectors"][name]
    assert entry["secret_keys"] == ["x.api.password"]
    assert entry["config"]["x.api.password"] == MARKER
    assert entry["config"]["x.vault.token"] == "${vault:kafka/connect:token}"  # a reference is no secret
    copy_run(stack, manifest)

    with pytest.raises(ConfigError, match="x.api.password") as refused:  # no source worker to ask
        migrate_connectors(manifest, stack.target_connect)
    assert secret not in str(refused.value)
    with pytest.raises(ConnectorNotFound):
        stack.target_connect.config(name)  # nothing was created

    for _ in range(2):  # a re-run creates nothing twice
        [result] = migrate_connectors(manifest, stack.target_connect, source_connect=stack.source_connect)
        assert result["state"] == "STOPPED"
    got = stack.target_connect.config(name)
    assert {k: v for k, v in got.items() if k != "name"} == config

    assert files_holding(state, secret) == []
    assert files_holding(state, "x.api.password")  # the key is named, only its value is not kept
    for path in [state, *state.rglob("*")]:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))


def test_basic_auth_user_info_and_url_credentials_are_left_out_too(stack, unique_name, tmp_path,
                                                                   connectors):
    """Names the old rule missed (basic.auth.user.info, ...pwd) and a URL's credentials: the snapshot
    keeps the URL without them, the target gets the live values."""
    topic, name, secret = unique_name, f"{unique_name}-src", f"pw-{unique_name}"
    user_info, url_pw, pwd = f"sr-user:ui-{unique_name}", f"url-{unique_name}", f"pwd-{unique_name}"
    connectors += [(stack.source_connect, name), (stack.target_connect, name)]
    config = stopped_source_connector(
        stack, topic, name, tmp_path / "in.txt", secret, **{
            "value.converter.basic.auth.user.info": user_info, "x.database.pwd": pwd,
            "x.connection.url": f"jdbc:postgresql://app:{url_pw}@db:5432/shop?sslmode=require"})
    state = tmp_path / "state"
    manifest = Manifest(str(state), "run-1")
    entry = take_snapshot(manifest, stack.source, topics_include=topic, source_connect=stack.source_connect,
                          connectors=[name])["connectors"][name]
    assert entry["secret_keys"] == ["value.converter.basic.auth.user.info", "x.api.password", "x.connection.url",
                                    "x.database.pwd"]
    assert entry["config"]["x.connection.url"] == f"jdbc:postgresql://app:{HIDDEN}@db:5432/shop?sslmode=require"
    assert entry["config"]["value.converter.basic.auth.user.info"] == entry["config"]["x.database.pwd"] == MARKER
    copy_run(stack, manifest)
    [result] = migrate_connectors(manifest, stack.target_connect, source_connect=stack.source_connect)
    assert result["state"] == "STOPPED"
    assert {k: v for k, v in stack.target_connect.config(name).items() if k != "name"} == config
    for value in (secret, user_info, url_pw, pwd):
        assert files_holding(state, value) == []


def test_a_connector_changed_since_the_snapshot_is_refused(stack, unique_name, tmp_path, connectors):
    topic, name, secret = unique_name, f"{unique_name}-src", f"pw-{unique_name}"
    connectors += [(stack.source_connect, name), (stack.target_connect, name)]
    config = stopped_source_connector(stack, topic, name, tmp_path / "in.txt", secret)
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    take_snapshot(manifest, stack.source, topics_include=topic, source_connect=stack.source_connect, connectors=[name])
    copy_run(stack, manifest)
    changed = {**config, "x.api.password": "another", "batch.size": "100"}
    requests.put(f"{stack.source_connect.url}/connectors/{name}/config", json=changed, timeout=30).raise_for_status()
    wait_until(lambda: stack.source_connect.config(name).get("batch.size") == "100", "the changed config")

    with pytest.raises(ConnectorStateError, match=r"changed since the snapshot \(keys: batch.size\)") as refused:
        migrate_connectors(manifest, stack.target_connect, source_connect=stack.source_connect)
    assert secret not in str(refused.value) and "another" not in str(refused.value)
    with pytest.raises(ConnectorNotFound):
        stack.target_connect.config(name)


def test_keys_the_plugin_declares_passwords_are_secrets(stack):
    """MirrorSourceConnector declares ssl.keystore.key a PASSWORD (its name tells it too, since the
    name rule counts a last segment `key` alone as key material)."""
    config = {"connector.class": "org.apache.kafka.connect.mirror.MirrorSourceConnector",
              "source.cluster.alias": "a", "target.cluster.alias": "b", "ssl.keystore.key": "-----BEGIN KEY-----",
              "ssl.keystore.location": "/etc/kafka/keystore.p12", "key.converter": "x"}
    stored, keys = redacted(stack.source_connect, "mirror", config)
    assert keys == ["ssl.keystore.key"]
    assert stored["ssl.keystore.key"] == MARKER and stored["ssl.keystore.location"] == "/etc/kafka/keystore.p12"
    assert redacted(None, "mirror", config)[1] == ["ssl.keystore.key"]  # by name alone as well
