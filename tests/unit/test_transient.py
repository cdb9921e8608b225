"""Which librdkafka errors the copy resumes after (from the target's end) and which end it."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from kmigrate.copy.writer import transient


@pytest.mark.parametrize("code", [
    KafkaError._DESTROY_BROKER,  # a request cut off when a whole cluster restarted and librdkafka bootstrapped again
    KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError.NOT_LEADER_FOR_PARTITION,
])
def test_a_broker_going_away_is_transient(code):
    assert transient(KafkaError(code))


@pytest.mark.parametrize("code", [
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD,
])
def test_what_a_retry_cannot_mend_is_not(code):
    assert not transient(KafkaError(code))
