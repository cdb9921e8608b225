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
