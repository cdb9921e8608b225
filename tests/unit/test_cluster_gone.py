"""A cluster gone, known at once when every bootstrap server refuses the connection (its brokers
killed), not after a client's timeout: the unplanned failover's check that the source does not
answer, and the mirror's reading after a failed one (its stop is seen each interval). A server that
accepts the connection is left to the request, which waits for an answer."""
from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from kmigrate.client_settings import listening
from kmigrate.config import ClusterConfig
from kmigrate.copy import partition as copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ClusterUnavailable, KmigrateError
from kmigrate.kafka import ends as kafka_ends
from kmigrate.kafka.records import iter_range
from kmigrate.model import WorkUnit
from kmigrate.run.mirror import groups, stream, task
from kmigrate.run.mirror.promote import source_answers
from kmigrate.run.mirror.status import ends
from kmigrate.run.mirror.term import TermEnded


def closed_port() -> int:
    """A port just bound and closed on 127.0.0.1: nothing listens there."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def gone() -> ClusterConfig:
    return ClusterConfig.from_bootstrap("source", f"127.0.0.1:{closed_port()},localhost:{closed_port()}")


def test_what_listens_at_the_bootstrap_servers(silent: int) -> None:
    assert listening("source", f"127.0.0.1:{closed_port()}", 1.0) is False
    assert listening("source", f"127.0.0.1:{closed_port()},127.0.0.1:{silent}", 1.0) is True
    assert listening("source", f"no-such-broker.invalid:9092,127.0.0.1:{closed_port()}", 1.0) is None  # not known


def test_a_source_whose_every_server_refuses_does_not_answer_at_once() -> None:
    began = time.monotonic()
    assert source_answers(gone(), timeout_s=3.0) is False
    assert time.monotonic() - began < 1.0  # the client's check waited its 3 s


def test_a_source_that_accepts_the_connection_is_asked(silent: int) -> None:
    source = ClusterConfig.from_bootstrap("source", f"127.0.0.1:{closed_port()},127.0.0.1:{silent}")
    began = time.monotonic()
    assert source_answers(source, timeout_s=1.0) is False
    assert time.monotonic() - began >= 0.9  # it waited for an answer that never came


def test_the_mirrors_reading_after_a_failed_one_fails_at_once_when_nothing_listens() -> None:
    began = time.monotonic()
    with pytest.raises(ClusterUnavailable, match="no bootstrap server accepts a connection"):
        ends(gone(), [("t", 0)], stable=True, timeout_s=5.0, away=True)
    assert time.monotonic() - began < 1.0  # the reading waited its 5 s


def test_a_tasks_reading_after_a_partition_failed_fails_at_once_when_nothing_listens() -> None:
    """A task whose in-step copies failed on a source gone reads the ends of its partitions again:
    at once named, so that it sees its term end (an unplanned failover's stop) at its next turn."""
    source, target = gone(), ClusterConfig.from_bootstrap("target", f"127.0.0.1:{closed_port()}")
    partitions = {("t", p): task._Partition(WorkUnit("t", p, 0), None) for p in range(2)}
    partitions[("t", 0)].error = "fetching: connection refused"
    began = time.monotonic()
    assert task._behind(source, target, partitions, list(partitions), CopyOptions()) == {}
    assert time.monotonic() - began < 1.0  # each reading waited its OFFSETS_TIMEOUT_S
    assert all("no bootstrap server accepts a connection" in f.error for f in partitions.values())
    with pytest.raises(ClusterUnavailable, match="source cluster at 127.0.0.1"):
        kafka_ends.read(source, [("t", 0)], (kafka_ends.HIGH,), 5.0, away=True)


def test_a_partition_whose_in_step_connection_broke_is_handed_back_with_the_error(monkeypatch) -> None:
    """So that its next reading is one of a cluster maybe gone (above), not a 10 s wait on one."""
    leader = ("127.0.0.1", closed_port())
    monkeypatch.setattr(stream, "shared_admin", lambda cluster: contextlib.nullcontext(SimpleNamespace(client=None)))
    monkeypatch.setattr(stream.leaders, "leader", lambda cluster, topic, partition, client: leader)
    f = task._Partition(WorkUnit("t", 0, 0), None, committed=0)
    streams = stream.Streams(gone(), gone(), lambda: None)
    assert streams.add(f, lease=None).result(timeout=10) == 0
    streams.close()
    assert f.error.startswith("following in step stopped (ConnectionRefusedError") and not f.whole_only


def test_a_copy_resuming_on_a_cluster_gone_sees_its_term_end_without_a_readings_wait(monkeypatch) -> None:
    """A mirror's copy cut off by its source gone resumes only once something listens there: its
    term's end (the unplanned failover's stop) is seen between its attempts, each failing at once."""
    told = time.monotonic() + 0.5
    attempts = []

    def copy_once(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        attempts.append(time.monotonic())
        if len(attempts) > 1:
            time.sleep(3.0)  # stands in for a reading of the source gone, which waits out its timeout
        raise ClusterUnavailable("source: reading watermarks failed: all broker connections are down")

    def guard() -> None:
        if time.monotonic() > told:
            raise TermEnded("the mirror's term has ended")

    monkeypatch.setattr(copy_partition, "_copy_once", copy_once)
    monkeypatch.setattr(copy_partition, "_own_end_after", lambda target, unit, own_end, attempted: own_end)
    began = time.monotonic()
    with pytest.raises(TermEnded):
        copy_partition._copy_resuming(gone(), gone(), WorkUnit("t", 0, 10), CopyOptions(retry_for_s=10, guard=guard),
                                      (), SimpleNamespace(acquire=lambda: None), None)
    assert len(attempts) == 1 and time.monotonic() - began < 2.0


def test_the_mirrors_group_sync_holds_its_driver_back_no_longer_than_its_own_timeout() -> None:
    """Each status syncs the groups again: a source gone during one fails it within SYNC_TIMEOUT_S,
    and the driver sees the stop after it (the status's reading took 10 s)."""
    began = time.monotonic()
    with pytest.raises(KmigrateError, match="consumer group 'g'"):
        groups.sync_groups(gone(), gone(), ["g"], {("t", 0): 5})
    assert time.monotonic() - began < groups.SYNC_TIMEOUT_S + 1.0 and groups.SYNC_TIMEOUT_S <= 2.0


def test_a_copys_read_waiting_on_a_source_gone_sees_its_guard_at_each_empty_poll() -> None:
    """The record path's read stops short for `idle_timeout_s` before it gives up (10 s in a
    mirror); a term ended meanwhile (its guard raises) is seen at once."""
    consumer = SimpleNamespace(list_topics=lambda topic, timeout: None, assign=lambda tps: None,
                               consume=lambda n, timeout: [], unassign=lambda: None)
    told = time.monotonic() + 0.2

    def guard() -> None:
        if time.monotonic() > told:
            raise TermEnded("the mirror's term has ended")

    began = time.monotonic()
    with pytest.raises(TermEnded):
        next(iter_range(consumer, "t", 0, 5, 10, idle_timeout_s=10.0, idle_check=guard))
    assert time.monotonic() - began < 1.0
