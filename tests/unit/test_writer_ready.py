"""The copier's transactional producer asks for its coordinator only once a broker learned from
metadata has answered (librdkafka drops the bootstrap connection for it, and a coordinator lookup
in between waits 500 ms for its next try)."""
from __future__ import annotations

from types import SimpleNamespace

from kmigrate.copy.writer import Writer


class Answers:
    """list_topics answered by the brokers given in turn (-1: the bootstrap address)."""

    def __init__(self, *broker_ids: int) -> None:
        self.broker_ids = list(broker_ids)
        self.calls: list[str] = []

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        self.calls.append(topic)
        return SimpleNamespace(orig_broker_id=self.broker_ids.pop(0))


def writer() -> Writer:
    w = Writer.__new__(Writer)  # the method under test needs only the topic
    w.topic = "orders"
    return w


def test_metadata_is_asked_again_until_a_learned_broker_answers():
    producer = Answers(-1, -1, 1, 1)
    assert writer()._connected(producer) is producer
    assert producer.calls == ["orders"] * 3


def test_one_metadata_request_when_a_learned_broker_answers_first():
    producer = Answers(1)
    writer()._connected(producer)
    assert producer.calls == ["orders"]


def test_the_wait_is_bounded_when_only_the_bootstrap_address_answers():
    producer = Answers(*[-1] * 10)
    writer()._connected(producer)
    assert len(producer.calls) == 5
