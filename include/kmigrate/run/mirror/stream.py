"""The mirror's partitions in step with the source (docs/DESIGN.md §12): a partition whose last copy
wrote whole batches only, and left the DR end where that copy committed it, is followed by Fetches
that wait on the source leader for new records (`WAIT_MS`; after an answer with records, a few
milliseconds for more, `LINGER_MS`), one for all such partitions of the task
on that leader, in an incremental fetch session (each Fetch names the partitions whose position moved,
each answer holds those with news), and the plain batches each answer brings are written as they are,
one Produce a lane for all of them, with the producer id and sequence the copies before used (a lane
is one of the thread's `LANES` connections to a DR leader; a partition's writes all go on one). The next
Fetch is sent before an answer is written, and a write's answer is read when it is there, without waiting
for it, so that fetches and writes are in flight together (as a replica fetcher or MirrorMaker's
consumer and producer keep them), all from one thread a source leader. A lane has at most
`WRITES_IN_FLIGHT` requests unanswered: what the Fetches bring for it meanwhile is held, joined, and
goes in the next request once one is answered, so that a DR broker short of CPU, which answers a
connection's requests one after another, gets fewer, larger requests and the Fetches go on. A
partition is handed back only once every write sent for it is answered (a write still in flight
could land after the copy read the DR end); what it held unsent is dropped (the copy reads it again).

A batch goes only where a copy would have sent it whole (`_writable`): plain (not transactional, not
a marker, no record removed by compaction, CreateTime), at the partition's next offset, below the
source's last stable offset, and followed by a plain batch or ending where the source ends. Anything
else hands the partition back to the copy of `task` with all its checks: a batch that does not
qualify, a source log start that moved (the copy aligns the DR log start), an error from either
cluster, a lease not known to be held, the term ending. A write that failed in
part leaves the partition's DR end unknown: the copy after it checks what is there. Each write checks
the partition's lease and the term first, as every copy's writes do. Pure Python."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from kmigrate.claims.leases import PartitionLease
from kmigrate.config import ClusterConfig
from kmigrate.copy.together import (MAX_IN_FLIGHT, PartitionBatches, plain, produce_requests, producer_for, stamped,
                                    take_answers)
from kmigrate.errors import ClusterUnavailable, CopyInterrupted
from kmigrate.kafka import leaders, merge, multi, wire
from kmigrate.kafka.pool import shared_admin

log = logging.getLogger(__name__)

Key = tuple[str, int]
WAIT_MS = 100            # a Fetch waits this long at most for a record on any of its partitions
# a partition that wrote nothing for QUIET_AFTER_S goes to its source leader's quiet thread, whose Fetches
# wait QUIET_WAIT_MS (a broker answers at once when a record comes, so a quiet partition waits no
# longer for it): a Fetch costs the broker a read of every partition of its session, and the busy
# partitions' Fetches, many a second, then read those few only, not the thousands idle beside them;
# the first records a quiet partition writes bring it back to the busy thread
QUIET_AFTER_S = 10.0
QUIET_WAIT_MS = 500
# after an answer that brought records, the next Fetch waits up to LINGER_MS for LINGER_BYTES: a busy
# source's records in fewer, larger turns (each turn's writes cost the DR broker a Produce request)
LINGER_MS = 10
LINGER_BYTES = 64 << 10
PARTITION_BYTES = 1 << 20
# the consecutive batches of a partition one answer brings are joined up to this size (`merge.join`), and
# at most the DR topic's max.message.bytes: one Produce round for them, not one each
JOIN_BYTES = 256 << 10
FETCH_BYTES = 16 << 20
WRITES_IN_FLIGHT = 2     # a lane's Produce requests unanswered before the batches for it are held
# a thread's connections to a DR leader (lanes), its partitions spread over them, each partition on one: a
# broker reads a connection's next request only once it has answered the one before, so that a DR broker
# out of a pause works on this many of the thread's requests at once (as on those of MM2's producers)
LANES = 2
HELD_BYTES = 64 << 20    # batches held past this: the thread waits for the writes' answers before it fetches more


@dataclasses.dataclass
class _Streamed:
    f: Any                  # task._Partition: committed, own_end, producer, source_start, counts
    lease: PartitionLease
    done: Future[int]
    target_leader: tuple[str, int]
    next: int = 0           # the offset after the batches taken from the Fetch answers
    failed: bool = False    # a write failed: the partition is handed back
    records: int = 0


Thread = tuple[tuple[str, int], bool]  # a source leader, quiet or not


class Streams:
    """The task's partitions in step with the source: a source leader's partitions have a thread,
    which sends the next Fetch before it writes what the last one brought, and its quiet partitions
    another (`QUIET_AFTER_S`). `add` hands a partition
    over (a future resolved with the records written once it is handed back, after its last write),
    `close` hands every partition back and ends the threads."""

    def __init__(self, source: ClusterConfig, target: ClusterConfig, guard: Callable[[], None]) -> None:
        self.source, self.target, self.guard = source, target, guard
        self._lock = threading.Lock()
        self._leaders: dict[Thread, dict[Key, _Streamed]] = {}
        self._threads: dict[Thread, threading.Thread] = {}
        self._closed = False

    def add(self, f: Any, lease: PartitionLease) -> Future[int]:
        key = (f.unit.topic, f.unit.partition)
        done: Future[int] = Future()
        try:
            with shared_admin(self.source) as admin:
                source_leader = leaders.leader(self.source, *key, admin.client)
            with shared_admin(self.target) as admin:
                target_leader = leaders.leader(self.target, *f.unit.target_key, admin.client)
        except Exception as exc:  # noqa: BLE001 - a cluster not answering (KmigrateError, KafkaException)
            f.whole_only, f.error = False, f"not followed in step ({exc})"  # the copy looks the leaders up again
            log.info("mirror %s[%d]: not followed in step (%s)", *key, exc)
            done.set_result(0)
            return done
        with self._lock:
            if self._closed:
                done.set_result(0)
                return done
            where = (source_leader, quiet(f))
            self._leaders.setdefault(where, {})[key] = _Streamed(f, lease, done, target_leader, f.committed)
            if where not in self._threads:
                thread = threading.Thread(target=self._run, args=(where,), name="mirror-stream", daemon=True)
                self._threads[where] = thread
                thread.start()
        return done

    def close(self) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads.values())
        for thread in threads:
            thread.join()

    def _run(self, where: Thread) -> None:
        """The partitions on a source leader in step, quiet or not (`where`): the next Fetch is sent before what the last one
        brought is written, and the writes' answers are read when they are there, so that fetches
        and writes wait on the brokers meanwhile; a partition leaving is handed back once its
        writes are answered. One thread does it all (two threads handing answers over spent their
        time waiting for each other's GIL)."""
        address, quietly = where
        leaving: list[_Streamed] = []
        writer = _Writer(self.target, self.guard)
        broke = None
        try:
            with leaders.connection(self.source, address) as conn, writer:
                held: dict[Key, tuple[_Streamed, PartitionBatches]] = {}  # fetched, not sent yet
                session = multi.FetchSession()
                while True:
                    asked, leaving = self._asked(where)
                    writer.take_answered()
                    if asked:  # while anything is held, the Fetch comes back soon: an answer may free its leader
                        session.send(conn, {k: s.next for k, s in asked.items()}, partition_max_bytes=PARTITION_BYTES,
                                     max_bytes=FETCH_BYTES, **fetch_waits(bool(held), quietly))
                    for s in leaving:  # what a partition leaving held is not written: the copy reads it again
                        held.pop((s.f.unit.topic, s.f.unit.partition), None)
                    held = writer.send(held, WRITES_IN_FLIGHT)
                    if leaving or not asked or _bytes(held) > HELD_BYTES:
                        writer.settle(0)
                    for s in leaving:
                        _hand_back(s, moved=not s.failed and not self._closed)
                    leaving = []
                    if not asked:
                        session.close(conn)
                        return
                    self._take(where, asked, session.receive(conn), writer, held)
        except Exception as exc:  # noqa: BLE001 - a broken connection, a broker away: the copies take over
            log.info("mirror: following the partitions on %s:%d in step stopped (%s: %s)", *address,
                     type(exc).__name__, exc)
            if isinstance(exc, (OSError, ClusterUnavailable, CopyInterrupted)):  # not the term's end, a lease
                broke = f"following in step stopped ({type(exc).__name__}: {exc})"
        finally:
            writer.abandon()  # writes not answered: their partitions' DR ends are checked by the next copies
            with self._lock:  # unless _asked found none left (another thread may follow this leader since)
                mine = self._threads.get(where) is threading.current_thread()
                streamed = self._leaders.pop(where, {}) if mine else {}
                if mine:
                    self._threads.pop(where)
            for s in [*leaving, *streamed.values()]:  # what was not written is copied
                _hand_back(s, broke)

    def _asked(self, where: Thread) -> tuple[dict[Key, _Streamed], list[_Streamed]]:
        """The partitions of the thread (`where`) the next Fetch asks for (none: the thread ends, and no
        other thread follows them until `add` starts one), and those leaving (the term ending, a
        write failed, or quiet where the thread is not, or the other way round: they move)."""
        with self._lock:
            streamed = self._leaders.get(where, {})
            leaving = [streamed.pop(k) for k, s in list(streamed.items())
                       if self._closed or s.failed or quiet(s.f) != where[1]]
            if not streamed:
                self._leaders.pop(where, None)
                self._threads.pop(where, None)
            return dict(streamed), leaving

    def _take(self, where: Thread, asked: dict[Key, _Streamed], fetched: dict, writer: _Writer,
              held: dict[Key, tuple[_Streamed, PartitionBatches]]) -> None:
        """What a Fetch brought that goes whole added to what each partition holds, its position moved
        past it; a partition whose answer does not qualify is handed back once the writes sent are
        answered, what it held dropped."""
        for key, answer in fetched.items():  # a partition the session's answer leaves out has nothing new
            s = asked.get(key)
            if s is None or s.failed:  # a write of it failed after this Fetch was sent (what it held is not sent)
                continue
            batches, why = _writable(s.f, answer, s.next)
            if why:
                log.info("mirror %s[%d]: handed back to the copy (%s)", *key, why)
                if answer.error in wire.TRANSIENT:
                    leaders.forget(self.source, [key])
                with self._lock:
                    self._leaders.get(where, {}).pop(key, None)
                held.pop(key, None)
                writer.settle(0)
                _hand_back(s)
            elif batches:
                if key in held:  # not sent yet: what came since goes with it
                    batches = held[key][1].batches + batches
                if len(batches) > 1 and s.f.batch_limit:
                    joined = merge.join(batches, min(JOIN_BYTES, s.f.batch_limit))
                    s.f.joined += len(batches) - len(joined)
                    batches = joined
                held[key] = (s, PartitionBatches(s.f.unit, s.target_leader, batches,
                                                 s.f.producer[0] if s.f.producer else None))
                s.next = held[key][1].end


@dataclasses.dataclass
class _Turn:
    writes: dict[Key, tuple[_Streamed, PartitionBatches]]
    unanswered: int = 0  # its Produce requests not answered yet


class _Writer:
    """A thread's writes to the DR leaders: each turn's Produce requests sent at once (at most
    MAX_IN_FLIGHT unanswered a lane), their answers read when they are there (`take_answered`) or
    waited for (`settle`), in order on each lane's connection, which the thread holds for its
    life. A turn is taken in once answered: each partition's DR end moved past its batches, or the
    partition failed (its DR end unknown: the copy after it checks) and leaves at the next turn."""

    def __init__(self, target: ClusterConfig, guard: Callable[[], None]) -> None:
        self.target, self.guard = target, guard
        # a lane (DR leader, lane number): its connection, its requests in the order sent (correlation
        # id, expected base offsets, turn); a partition keeps the lane it was given first (its writes in order)
        self.conns: dict[tuple[tuple[str, int], int], Any] = {}
        self.pending: dict[tuple[tuple[str, int], int], collections.deque[tuple[int, dict[Key, int], _Turn]]] = {}
        self.lanes: dict[Key, int] = {}
        self.given: collections.Counter[tuple[str, int]] = collections.Counter()  # partitions given a lane, a leader
        self.turns: collections.deque[_Turn] = collections.deque()
        self._held = contextlib.ExitStack()

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        if exc[0] is None and self.turns:  # answers left unread: the connections are closed, not pooled
            unread = ConnectionError("Produce answers left unread")
            exc = (type(unread), unread, None)
        self._held.__exit__(*exc)

    def send(self, writes: dict[Key, tuple[_Streamed, PartitionBatches]], in_flight: int | None = None
             ) -> dict[Key, tuple[_Streamed, PartitionBatches]]:
        """A turn's writes sent, but those of a partition that failed (dropped) and, with `in_flight`,
        those for a leader with that many requests unanswered: returned, held for a later turn."""
        def check(s: _Streamed) -> Callable[[], None]:
            def checked() -> None:
                self.guard()
                s.lease.check()
            return checked

        writes = {key: w for key, w in writes.items() if not w[0].failed}
        held = {key: w for key, w in writes.items()
                if in_flight is not None and len(self.pending.get(self._lane(key, w[1]), ())) >= in_flight}
        writes = {key: w for key, w in writes.items() if key not in held}
        if not writes:
            return held
        turn = _Turn(writes)
        self.turns.append(turn)
        parts = {key: part for key, (_, part) in writes.items()}
        checks = {key: check(s) for key, (s, _) in writes.items()}
        for lane, keys in multi.by_leader({key: self._lane(key, part) for key, part in parts.items()}).items():
            if lane not in self.conns:
                self.conns[lane] = self._held.enter_context(leaders.connection(self.target, lane[0]))
                self.pending[lane] = collections.deque()
            mine = {key: parts[key] for key in keys}
            on_dr = {part.target_key: part for part in mine.values()}  # a Produce request names the DR partitions
            producer_for(self.conns[lane], mine)
            for key in keys:  # a partition's first write in step took a producer id: kept for its next writes and copies
                if not writes[key][0].f.producer:
                    writes[key][0].f.producer.append(mine[key].producer)
            for request in produce_requests(mine, checks):
                while len(self.pending[lane]) >= MAX_IN_FLIGHT:
                    self._receive(lane)
                batches, expected = stamped(on_dr, {mine[key].target_key: b for key, b in request.items()})
                self.pending[lane].append((multi.send_produce(self.conns[lane], batches), expected, turn))
                turn.unanswered += 1
        return held

    def _lane(self, key: Key, part: PartitionBatches) -> tuple[tuple[str, int], int]:
        """The lane a partition's writes go on: the one it was given first, else its leader's next in turn."""
        lane = self.lanes.get(key)
        if lane is None:
            lane = self.lanes[key] = self.given[part.target_leader] % LANES
            self.given[part.target_leader] += 1
        return part.target_leader, lane

    def take_answered(self) -> None:
        """The answers already there read, without waiting for any, and the turns they complete taken in."""
        for lane, queue in self.pending.items():
            while queue and self.conns[lane].answer_waiting():
                self._receive(lane)
        while self.turns and not self.turns[0].unanswered:
            self._take_in(self.turns.popleft())

    def settle(self, keep: int) -> None:
        """Read the answers of every turn but the last `keep`, and take those turns in."""
        while len(self.turns) > keep:
            turn = self.turns[0]
            for lane, queue in self.pending.items():
                while turn.unanswered and any(t is turn for _, _, t in queue):
                    self._receive(lane)
            self._take_in(self.turns.popleft())

    def _receive(self, lane: tuple[tuple[str, int], int]) -> None:
        correlation_id, expected, turn = self.pending[lane].popleft()
        answered, answers = multi.receive_produce(self.conns[lane])
        if answered != correlation_id:
            (host, port), _ = lane
            raise ConnectionError(f"the DR broker {host}:{port} answered request {answered}, not {correlation_id}")
        take_answers({part.target_key: part for _, part in turn.writes.values()}, expected, answers)
        turn.unanswered -= 1

    def _take_in(self, turn: _Turn) -> None:
        for key, (s, part) in turn.writes.items():
            if s.failed:  # an earlier turn's write failed: its DR end is left to the copy
                continue
            if part.failed or part.written != len(part.batches):
                log.info("mirror %s[%d]: writing in step failed (%s); the copy checks the DR end", *key,
                         part.failed or f"{part.written} of {len(part.batches)} batches sent")
                self._unknown(s)
                continue
            records = sum(b.records for b in part.batches)
            s.f.own_end = s.f.committed = part.end
            s.f.wrote_at = time.monotonic()
            s.f.records += records
            s.f.in_step += records
            s.f.copies += 1
            s.records += records

    def abandon(self) -> None:
        """The turns not answered (the thread stopped): their partitions' DR ends are unknown."""
        for turn in self.turns:
            for s, _ in turn.writes.values():
                self._unknown(s)
        self.turns.clear()

    def _unknown(self, s: _Streamed) -> None:
        leaders.forget(self.target, [s.f.unit.target_key])
        s.f.committed = None
        s.f.producer.clear()  # its sequence is not known
        s.failed = True


def fetch_waits(holding: bool, quietly: bool = False) -> dict[str, int]:
    """How long the next Fetch in step waits, and for how many bytes: while the thread is `holding`
    batches (those the last answer brought, or those waiting for their leader's answer), LINGER_MS
    for LINGER_BYTES (a busy source's records in fewer, larger turns, and the thread back soon to
    send what waits); else WAIT_MS for the first record, QUIET_WAIT_MS on a quiet thread."""
    if holding and LINGER_MS > 0:
        return {"max_wait_ms": LINGER_MS, "min_bytes": LINGER_BYTES}
    return {"max_wait_ms": QUIET_WAIT_MS if quietly else WAIT_MS, "min_bytes": 1}


def quiet(f: Any) -> bool:
    """Whether a partition in step is quiet: it wrote no record for QUIET_AFTER_S."""
    return time.monotonic() - f.wrote_at >= QUIET_AFTER_S


def _bytes(writes: dict[Key, tuple[_Streamed, PartitionBatches]]) -> int:
    return sum(len(batch.data) for _, part in writes.values() for batch in part.batches)


def _hand_back(s: _Streamed, broke: str | None = None, moved: bool = False) -> None:
    """`broke`: why a connection broke; the partition's error until its ends are read again, which
    first checks that both clusters listen (a source gone is known at once: task._behind).
    `moved`: handed back to be followed in step again at once, by its leader's other thread, every
    write sent for it answered (it became quiet, or wrote after a quiet spell)."""
    if not moved:
        s.f.whole_only = False  # the next copy of the partition decides whether it is followed in step again
    if broke:
        s.f.error = broke
    if not s.done.done():
        s.done.set_result(s.records)


def _writable(f: Any, fetched: multi.Fetched, position: int | None = None) -> tuple[list[wire.Batch], str | None]:
    """The batches of a fetched partition that go whole now, from `position` (where the batches
    written or taken to be written end; its DR end by default), or why the partition is handed back."""
    position = f.committed if position is None else position
    if fetched.error:
        return [], f"the source answered {wire.error_name(fetched.error)}"
    if fetched.log_start > f.source_start:
        return [], f"the source's log start moved to {fetched.log_start}"
    batches = [b for b in wire.parse_batches(fetched.records) if b.last_offset >= position]
    whole, expected = 0, position
    for index, batch in enumerate(batches):
        if batch.base_offset != expected or not plain(batch) or batch.last_offset >= fetched.stable:
            break
        following = batches[index + 1] if index + 1 < len(batches) else None
        ends_the_source = batch.last_offset + 1 == fetched.stable >= fetched.high
        if not ends_the_source and (following is None or following.base_offset != batch.last_offset + 1
                                    or not plain(following)):
            break
        whole, expected = index + 1, batch.last_offset + 1
    if batches and not whole:
        return [], f"offset {position} is not a plain batch the copy would send whole"
    return batches[:whole], None
