"""The copier's raw paths (whole record batches, fast alignment fillers) on authenticated clusters:
TLS from Python's ssl module, SASL from kafka-python's mechanisms, as the migrator principal that
may only Describe and Read on the source."""
from __future__ import annotations

import logging

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka import transport, wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support.kafka import records_of, seed_plain


@pytest.mark.parametrize("method", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "MTLS"])
def test_whole_batches_and_fast_fillers_over_each_auth_method(secure_stack, unique_name, method, caplog):
    topic = unique_name
    seed_plain(secure_stack.source, topic, 1, 2_000, **{"batch.num.messages": 100})  # 20 batches
    with ClusterAdmin(secure_stack.source) as admin:
        admin.delete_records(topic, 0, 700)  # the target's first 700 offsets are fillers
    source = secure_stack.cluster("source", "migrator", method)
    target = secure_stack.cluster("target", "migrator", method)
    assert transport.Transport.of(source).name == ("SSL" if method == "MTLS" else f"SASL_SSL/{method}")

    with ClusterAdmin(source) as source_admin, ClusterAdmin(target) as target_admin:
        prepare_target_topic(source_admin, target_admin, topic)  # as the migrator: created on the target
    with caplog.at_level(logging.INFO, logger="kmigrate"):
        result = copy_partition(source, target, WorkUnit(topic, 0, 2_000), CopyOptions(verify=False))
    assert "record path (librdkafka) copies instead" not in caplog.text  # both raw paths were taken
    assert result.whole_batches > 0 and result.fillers == 700
    assert records_of(secure_stack.target, topic, 0) == records_of(secure_stack.source, topic, 0)


def test_a_wrong_password_is_refused_by_name_without_the_password(secure_stack):
    settings = {**secure_stack.cluster("source").settings, "sasl.password": "not-the-password-4711"}
    with pytest.raises(transport.AuthenticationFailed) as failed:
        wire.BrokerConnection("localhost", 19192, transport=transport.Transport.of(ClusterConfig("source", settings)))
    assert "SCRAM-SHA-512 authentication of 'migrator'" in str(failed.value)
    assert "not-the-password-4711" not in str(failed.value)


def test_a_broker_certificate_from_an_unknown_ca_fails_the_tls_handshake(secure_stack):
    settings = {**secure_stack.cluster("source", method="MTLS").settings}
    cluster = ClusterConfig("source", {**settings, "ssl.ca.location": "/etc/ssl/certs/ca-certificates.crt"})
    with pytest.raises(transport.AuthenticationFailed, match="TLS handshake with the broker localhost:19194 failed"):
        wire.BrokerConnection("localhost", 19194, transport=transport.Transport.of(cluster))


@pytest.mark.parametrize("settings, reason", [
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}, "SASL mechanism OAUTHBEARER"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI", "sasl.kerberos.service.name": "kafka"},
     "sasl.kerberos.service.name"),
    ({"security.protocol": "SSL", "ssl.keystore.location": "/x.p12"}, "ssl.keystore.location"),
])
def test_what_the_raw_path_cannot_speak_takes_the_record_path_with_a_note(settings, reason, caplog):
    cluster = ClusterConfig("target", {"bootstrap.servers": "localhost:1", **settings})
    with pytest.raises(transport.Unsupported, match=reason):
        transport.Transport.of(cluster)
    with caplog.at_level(logging.INFO, logger="kmigrate"):
        assert not transport.raw_capable(cluster)
    assert f"target: whole-batch copy is not available with {reason}" in caplog.text
