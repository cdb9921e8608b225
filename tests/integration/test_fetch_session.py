"""An incremental fetch session (kmigrate.kafka.multi.FetchSession) with a real broker: its first
Fetch opens the session and answers for every partition; each Fetch after names only the partitions
whose position moved, and its answer holds only the partitions with news; a partition that leaves is
forgotten by the broker; a session the broker does not know is asked in full again; a closed session
is gone from the broker."""
from __future__ import annotations

from kmigrate.kafka import leaders, multi, wire

from tests.support.kafka import create_topic, produce


def _offsets(fetched: multi.Fetched) -> list[int]:
    return [o for b in wire.parse_batches(fetched.records) for o in range(b.base_offset, b.last_offset + 1)]


def test_a_session_answers_only_for_the_partitions_with_news(stack, unique_name):
    topic = unique_name
    create_topic(stack.source, topic, partitions=3)
    produce(stack.source, topic, [(None, b"a%d" % i) for i in range(2)], partition=0)
    produce(stack.source, topic, [(None, b"b")], partition=1)
    tps = [(topic, p) for p in range(3)]
    address = leaders.look_up(stack.source, tps)[tps[0]]
    session = multi.FetchSession()
    before = multi.fetches_sent()
    with leaders.connection(stack.source, address) as conn:
        session.send(conn, {tp: 0 for tp in tps})
        first = session.receive(conn)
        assert session.id and session.epoch == 1
        assert set(first) == set(tps)  # the full answer that opened the session
        assert [_offsets(first[tp]) for tp in tps] == [[0, 1], [0], []]

        positions = {tps[0]: 2, tps[1]: 1, tps[2]: 0}  # what the first answer brought, taken
        produce(stack.source, topic, [(None, b"c")], partition=2)
        session.send(conn, positions)
        second = session.receive(conn)
        assert list(second) == [tps[2]] and _offsets(second[tps[2]]) == [0] and session.epoch == 2
        counted = multi.fetches_sent()  # what a mirror task reports: two sent, the first in full
        assert (counted["sent"] - before["sent"], counted["in_full"] - before["in_full"]) == (2, 1)

        # partition 1 leaves the session; new records on it are not answered for, those on 0 are
        del positions[tps[1]]
        positions[tps[2]] = 1
        produce(stack.source, topic, [(None, b"d")], partition=1)
        produce(stack.source, topic, [(None, b"e")], partition=0)
        session.send(conn, positions)
        third = session.receive(conn)
        assert list(third) == [tps[0]] and _offsets(third[tps[0]]) == [2]

        # a session the broker does not know: nothing answered, and the next Fetch asks in full
        opened = session.id
        session.id += 1
        session.send(conn, positions)
        assert session.receive(conn) == {} and session.id == 0
        session.send(conn, positions)
        again = session.receive(conn)
        assert set(again) == set(positions) and _offsets(again[tps[0]]) == [2]
        assert session.id and session.id != opened

        # closed: the broker no longer knows the session
        closed = multi.FetchSession()
        closed.id, closed.epoch, closed.sent = session.id, session.epoch, dict(positions)
        session.close(conn)
        assert session.id == 0
        closed.send(conn, positions)
        assert closed.receive(conn) == {} and closed.id == 0
