"""How a partition followed in step has its writes answered (kmigrate.run.mirror.stream's writer;
pure logic: the DR leader is a stand-in that answers each Produce in order, so the clusters play no
part): a turn is taken in only once all its answers are read, answers are read without waiting when
they are there, writes for a leader with requests unanswered are held, at most MAX_IN_FLIGHT
requests wait on a leader, a write refused fails its partition and no later answer moves its DR
end, and a writer left with answers unread closes its connections instead of pooling them."""
from __future__ import annotations

import collections
import contextlib
import struct
from concurrent.futures import Future
from types import SimpleNamespace

import pytest
from kmigrate.copy import fastfill
from kmigrate.copy.together import MAX_IN_FLIGHT, PartitionBatches
from kmigrate.kafka import wire
from kmigrate.model import WorkUnit
from kmigrate.run.mirror import stream, task

from tests.support.wire import as_fetched

DR = ("dr", 9092)


class Leader:
    """A DR leader that appends each batch at its partition's end and answers each Produce in the
    order sent, with an error (NOT_LEADER) and no append where `refuse` holds (partition, end)."""

    def __init__(self) -> None:
        self.refuse: set[tuple[int, int]] = set()
        self.ends: collections.Counter = collections.Counter()
        self.sent: collections.deque = collections.deque()
        self.next_id, self.most_unanswered, self.closed_by = 0, 0, None

    def send(self, conn, batches):  # noqa: ANN001 - multi.send_produce's signature
        answers = {}
        for tp, batch in batches.items():
            base = self.ends[tp]
            if (tp[1], base) in self.refuse:
                answers[tp] = (6, -1)
            else:
                answers[tp] = (0, base)
                self.ends[tp] += struct.unpack_from(">i", batch, 57)[0]
        self.next_id += 1
        self.sent.append((self.next_id, answers))
        self.most_unanswered = max(self.most_unanswered, len(self.sent))
        return self.next_id

    def receive(self, conn):  # noqa: ANN001
        return self.sent.popleft()

    def answer_waiting(self) -> bool:  # the connection's: every request sent is answered at once here
        return bool(self.sent)

    @contextlib.contextmanager
    def connection(self, cluster, address):  # noqa: ANN001
        try:
            yield self
        except BaseException as exc:
            self.closed_by = exc
            raise


@pytest.fixture
def leader(monkeypatch):
    dr = Leader()
    monkeypatch.setattr(stream.multi, "send_produce", dr.send)
    monkeypatch.setattr(stream.multi, "receive_produce", dr.receive)
    monkeypatch.setattr(stream.leaders, "connection", dr.connection)
    monkeypatch.setattr(stream.leaders, "forget", lambda cluster, keys: None)
    return dr


def streamed(partition: int, committed: int = 0) -> stream._Streamed:
    f = task._Partition(WorkUnit("t", partition, 0), committed)
    f.committed, f.producer = committed, [wire.Idempotence(7, 0)]
    return stream._Streamed(f, SimpleNamespace(check=lambda: None), Future(), DR, committed)


def part(s: stream._Streamed, base: int, *sizes: int) -> PartitionBatches:
    blob, offset = b"", base
    for size in sizes:
        blob += as_fetched(fastfill.filler_batch(size), offset, 0, 42)
        offset += size
    return PartitionBatches(s.f.unit, DR, wire.parse_batches(memoryview(bytearray(blob))), s.f.producer[0])


def test_a_turn_is_taken_in_once_answered_and_the_last_ones_wait(leader):
    a, b = streamed(0), streamed(1)
    with stream._Writer(None, lambda: None) as writer:
        writer.send({("t", 0): (a, part(a, 0, 5, 5)), ("t", 1): (b, part(b, 0, 3))})
        writer.send({})  # nothing to write: no turn
        writer.send({("t", 0): (a, part(a, 10, 4))})
        writer.settle(1)
        assert (a.f.committed, a.f.in_step, b.f.committed, b.records) == (10, 10, 3, 3)  # the first turn only
        writer.settle(0)
        assert (a.f.committed, a.f.own_end, a.f.in_step, a.records) == (14, 14, 14, 14)
        assert not leader.sent and not a.failed and not b.failed
    assert leader.closed_by is None


def test_writes_for_a_leader_with_requests_unanswered_are_held_and_answers_read_without_waiting(leader, monkeypatch):
    monkeypatch.setattr(stream, "LANES", 1)
    a, b = streamed(0), streamed(1)
    slow = {"answering": False}
    monkeypatch.setattr(leader, "answer_waiting", lambda: slow["answering"] and bool(leader.sent))
    with stream._Writer(None, lambda: None) as writer:
        assert writer.send({("t", 0): (a, part(a, 0, 5))}, 1) == {}
        second = {("t", 0): (a, part(a, 5, 2)), ("t", 1): (b, part(b, 0, 3))}
        assert writer.send(second, 1) == second  # one request unanswered on the leader: held, nothing sent
        writer.take_answered()  # no answer there yet: nothing waited for, nothing taken in
        assert len(leader.sent) == 1 and a.f.committed == 0
        slow["answering"] = True
        writer.take_answered()
        assert (a.f.committed, a.records, len(leader.sent)) == (5, 5, 0)
        assert writer.send(second, 1) == {}
        writer.take_answered()
        assert (a.f.committed, b.f.committed, a.f.in_step + b.f.in_step) == (7, 3, 10)


def test_a_leaders_partitions_are_spread_over_its_lanes_each_keeping_its_own(monkeypatch):
    """Two lanes: each its own connection (a stand-in leader of its own, whose ends count only what
    came on it, so that a partition moved to the other lane would be written at the wrong offset and
    fail), the partitions given one in turn, and writes held only for a lane with a request unanswered."""
    monkeypatch.setattr(stream, "LANES", 2)
    lanes: list[Leader] = []

    @contextlib.contextmanager
    def connection(cluster, address):  # noqa: ANN001
        lanes.append(Leader())
        yield lanes[-1]

    monkeypatch.setattr(stream.leaders, "connection", connection)
    monkeypatch.setattr(stream.multi, "send_produce", lambda conn, batches: conn.send(conn, batches))
    monkeypatch.setattr(stream.multi, "receive_produce", lambda conn: conn.receive(conn))
    s = [streamed(p) for p in range(4)]
    with stream._Writer(None, lambda: None) as writer:
        assert writer.send({("t", p): (s[p], part(s[p], 0, 2)) for p in range(4)}, 1) == {}
        assert len(lanes) == 2 and [sorted(tp[1] for tp in lane.ends) for lane in lanes] == [[0, 2], [1, 3]]
        writer.take_answered()
        assert writer.send({("t", p): (s[p], part(s[p], 2, 3)) for p in (3, 2, 1, 0)}, 1) == {}
        writer.settle(0)
        later = {("t", 1): (s[1], part(s[1], 5, 1)), ("t", 2): (s[2], part(s[2], 5, 1))}
        assert writer.send({("t", 0): (s[0], part(s[0], 5, 1))}, 1) == {}
        assert writer.send(later, 1) == {("t", 2): later[("t", 2)]}  # lane 0 has a request unanswered, lane 1 not
        writer.settle(0)
    assert [x.f.committed for x in s] == [6, 6, 5, 5] and not any(x.failed for x in s)
    assert [dict(lane.ends) for lane in lanes] == [{("t", 0): 6, ("t", 2): 5}, {("t", 1): 6, ("t", 3): 5}]


def test_the_writes_of_a_partition_that_failed_are_dropped_not_sent(leader):
    a, b = streamed(0), streamed(1)
    a.failed = True
    with stream._Writer(None, lambda: None) as writer:
        assert writer.send({("t", 0): (a, part(a, 0, 5)), ("t", 1): (b, part(b, 0, 2))}, 1) == {}
        writer.settle(0)
    assert leader.ends == {("t", 1): 2} and b.f.committed == 2


def test_no_more_than_max_in_flight_requests_wait_on_a_leader(leader, monkeypatch):
    monkeypatch.setattr(stream, "produce_requests", lambda parts, checks: ({k: b} for k, p in parts.items()
                                                                           for b in p.batches))
    a = streamed(0)
    with stream._Writer(None, lambda: None) as writer:
        writer.send({("t", 0): (a, part(a, 0, *[1] * (2 * MAX_IN_FLIGHT + 1)))})
        writer.settle(0)
    assert leader.most_unanswered == MAX_IN_FLIGHT
    assert a.f.committed == 2 * MAX_IN_FLIGHT + 1


def test_a_refused_write_fails_its_partition_and_no_later_answer_moves_its_end(leader):
    leader.refuse = {(0, 5)}
    a, b = streamed(0), streamed(1)
    with stream._Writer(None, lambda: None) as writer:
        writer.send({("t", 0): (a, part(a, 0, 5)), ("t", 1): (b, part(b, 0, 2))})
        writer.send({("t", 0): (a, part(a, 5, 5)), ("t", 1): (b, part(b, 2, 2))})
        writer.send({("t", 0): (a, part(a, 10, 5))})  # appended at 5, not 10 (a broker would refuse its sequence)
        writer.settle(0)
    assert a.failed and a.f.committed is None and a.f.producer == [] and a.f.in_step == 5
    assert not b.failed and b.f.committed == 4


def test_a_writer_left_with_answers_unread_closes_its_connections(leader):
    a = streamed(0)
    with stream._Writer(None, lambda: None) as writer:
        writer.send({("t", 0): (a, part(a, 0, 5))})
    assert isinstance(leader.closed_by, ConnectionError)
    writer.abandon()
    assert a.failed and a.f.committed is None
