"""A retried reading of ClusterAdmin keeps to its timeout against a broker gone: offsets, whose first
tries fail at once (no leader known) and last one waits for its answer, on a clock of the test's own
(the admin's requests are stand-ins: what is tested is how long it lets them wait); a group's
offsets, against a port nothing listens on."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmigrate.errors import ClusterUnavailable
from kmigrate.kafka import admin as admin_module
from kmigrate.kafka import wire as wire_module
from kmigrate.kafka.admin import ClusterAdmin


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Failed:
    def __init__(self, error: KafkaError) -> None:
        self.error = error

    def result(self):  # noqa: ANN201
        raise KafkaException(self.error)


class GoneBroker:
    """Answers the first `fast` requests at once with no leader, then each one after its timeout."""

    def __init__(self, clock: Clock, fast: int = 9) -> None:
        self.clock, self.fast, self.timeouts = clock, fast, []

    def answer(self, timeout: float) -> KafkaError:
        self.timeouts.append(timeout)
        if len(self.timeouts) <= self.fast:
            return KafkaError(KafkaError.LEADER_NOT_AVAILABLE, "No leaders found")
        self.clock.now += timeout
        return KafkaError(KafkaError._TIMED_OUT, "Local: Timed out", retriable=True)

    def list_offsets(self, wanted, isolation_level=None, request_timeout=None):  # noqa: ANN001, ANN201
        error = self.answer(request_timeout)
        return {tp: Failed(error) for tp in wanted}

    def list_topics(self, topic=None, timeout=None):  # noqa: ANN001, ANN201
        return None

    def get_watermark_offsets(self, tp, timeout=None):  # noqa: ANN001, ANN201
        raise KafkaException(self.answer(timeout))


@pytest.mark.parametrize("read", [
    lambda admin: admin.end_offsets([("t", 0)], retry=True),
    lambda admin: admin.watermarks("t", 0),
], ids=["end_offsets", "watermarks"])
def test_a_retried_reading_against_a_broker_gone_ends_within_its_timeout(monkeypatch, read):
    clock = Clock()
    for module in (admin_module, wire_module):  # the admin's retries, and the time left each try is given
        monkeypatch.setattr(module, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    broker = GoneBroker(clock)
    admin = object.__new__(ClusterAdmin)
    admin.cluster = SimpleNamespace(name="source", bootstrap_servers="localhost:1")
    admin.timeout_s, admin._admin, admin._connected, admin._offsets_reader = 10.0, broker, True, broker
    with pytest.raises(ClusterUnavailable, match="Timed out"):
        read(admin)
    # nine tries at once, 0.1 s apart, then one that waited for the 9.1 s left (not for 10 more: 10.9 s)
    assert broker.timeouts[9] == pytest.approx(9.1) and clock.now <= 10.3, (clock.now, broker.timeouts)


def test_a_groups_offsets_reading_keeps_to_its_admins_timeout_against_a_broker_gone():
    from kmigrate.config import ClusterConfig
    from kmigrate.errors import GroupError

    gone = ClusterConfig("source", {"bootstrap.servers": "127.0.0.1:1"})  # nothing listens: refused at once
    admin = object.__new__(ClusterAdmin)
    admin.cluster, admin.timeout_s = gone, 0.5
    began = time.monotonic()
    with pytest.raises(GroupError, match="could not be read or written in 0 s"):
        admin.committed("readers")
    # a mirror's status reading (10 s) once waited here for group_wire's own 30 s, its heartbeat with it
    assert time.monotonic() - began < 5


class NewPartitions:
    """Partitions just created on a cluster of several brokers: the first `unserved` readings answer
    as a leader without its log (UNKNOWN_TOPIC_OR_PARTITION), a broker that does not lead them yet
    (NOT_LEADER) or a client whose metadata has no leader yet (_NOENT) do, then an end offset; each
    client made is counted."""

    CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._NOENT)

    def __init__(self, unserved: int) -> None:
        self.unserved, self.asked, self.clients = unserved, 0, 1

    def client(self, kind, settings):  # noqa: ANN001, ANN201 - the ClusterConfig's, for a new admin client
        self.clients += 1
        return self

    def list_offsets(self, wanted, isolation_level=None, request_timeout=None):  # noqa: ANN001, ANN201
        self.asked += 1
        if self.asked > self.unserved:
            return {tp: SimpleNamespace(result=lambda: SimpleNamespace(offset=0)) for tp in wanted}
        code = self.CODES[self.asked % len(self.CODES)]
        return {tp: Failed(KafkaError(code, "not served yet")) for tp in wanted}


def _admin_of(monkeypatch, broker) -> ClusterAdmin:  # noqa: ANN001
    clock = Clock()
    monkeypatch.setattr(admin_module, "time", SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    admin = object.__new__(ClusterAdmin)
    admin.cluster = SimpleNamespace(name="target", bootstrap_servers="localhost:1", client=broker.client,
                                    admin=lambda: {})
    admin.timeout_s, admin._admin, admin._connected = 10.0, broker, True
    return admin


def test_new_partitions_are_waited_for_until_their_leaders_serve_them_each_round_a_new_client(monkeypatch):
    broker = NewPartitions(unserved=4)
    _admin_of(monkeypatch, broker).wait_until_served([("t", 0), ("t", 1)], timeout_s=60)
    # a client keeps the leaders it was first told of: each round after one with partitions unserved asks anew
    assert broker.asked == 5 and broker.clients == 5


def test_partitions_still_unserved_after_the_wait_are_named(monkeypatch):
    broker = NewPartitions(unserved=10_000)
    with pytest.raises(ClusterUnavailable, match=r"end offset of t\[0\].*not served yet"):
        _admin_of(monkeypatch, broker).wait_until_served([("t", 0)], timeout_s=3)
    assert 12 <= broker.asked <= 18  # asked every 0.2 s for the 3 s given, not the admin's 10


def test_an_ordinary_reading_does_not_take_an_unknown_partition_for_one_being_made(monkeypatch):
    broker = NewPartitions(unserved=1)
    broker.CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART,)  # a topic deleted, for any other reading
    with pytest.raises(ClusterUnavailable, match="not served yet"):
        _admin_of(monkeypatch, broker).end_offsets([("t", 0)], retry=True)
