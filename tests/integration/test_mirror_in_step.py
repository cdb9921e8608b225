"""The mirror's partitions followed in step with the source (kmigrate.run.mirror.stream), on the real
stack, the mirror's terms run in this process: a seeded live source (transactional producers mixing
their transactions into partitions that an idempotent producer writes too, with quiet spells in which
those partitions see its plain batches only, aborts with no record, a compacting topic, records
deleted at random offsets) written while the mirror runs; once
the producers stop and the mirror caught up, the DR cluster holds exactly what the producers were
told, at the source's offsets, every live verification was equal, and records were written in step."""
from __future__ import annotations

import os
import re
import threading
import time

import pytest
from confluent_kafka import Producer
from kmigrate.kafka import multi, wire
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror import stream
from kmigrate.run.mirror.driver import VERIFIED
from kmigrate.run.mirror.spec import MirrorSpec
from kmigrate.run.mirror.task import copy_term_here
from kmigrate.run.verify import batches

from tests.support.kafka import create_topic, produce, records_of
from tests.support.live_source import LiveSource, compare_with_model
from tests.support.mirror import mirrored, wait_caught_up, wait_for_round
from tests.support.waiting import wait_until

SEEDS = [int(s) for s in os.environ.get("KMIGRATE_IN_STEP_SEEDS", "41,42").split(",")]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_live_source_followed_in_step_lands_every_record_at_its_offset(stack, unique_name, tmp_path, seed):
    live = LiveSource(stack.source, unique_name, seed, quiet_spells=True)
    live.create()
    manifest = Manifest(str(tmp_path / "state"), "in-step")
    in_step: dict[str, int] = {}

    def copy_term(units, extras, term):  # noqa: ANN001 - the mirror's own, its rows counted a topic
        rows = copy_term_here((stack.source, stack.target), units, extras, term)
        for row in rows:
            in_step[row["topic"]] = in_step.get(row["topic"], 0) + row["in_step"]
        return rows

    spec = MirrorSpec(live.pattern, interval_s=0.5, verify_every_s=2.0, term_s=6.0)
    with mirrored(stack, manifest, spec, copy_term):
        try:
            wait_for_round(manifest, 1, timeout_s=120)
            live.start()
            wait_for_round(manifest, mirror_status.read(manifest)["round"] + 20, timeout_s=120)  # ten seconds of writes
            live.stop()
            status = wait_caught_up(manifest, stack.source, live.topics, timeout_s=120)
        finally:
            live.stop_writing()
    compared = compare_with_model(stack, live.topics, live.compacted, live.model)
    assert all(p["error"] is None for p in status["partitions"])
    totals = mirror_status.read(manifest)["totals"]
    assert 0 < totals["in_step"] <= totals["records"], totals
    assert in_step[f"{unique_name}.mixed"] > 0 and in_step[f"{unique_name}.compact"] > 0, in_step
    verified = manifest.read(VERIFIED)["rows"]
    assert verified and all(r["equal"] for r in verified), [(r["topic"], r["partition"], r.get("from"), r.get("to"),
                                                             r.get("problems")) for r in verified if not r["equal"]]
    print(f"seed {seed}: {compared} records compared, {totals['in_step']} of {totals['records']} written in step "
          f"({totals['joined']} batches joined into others), {live.model.transactions} transactions, {live.model.deletes} deletes; in step by topic {in_step}")


def test_idle_partitions_wait_in_step_from_their_first_copy_of_a_term(stack, unique_name, tmp_path):
    """A partition empty when the mirror starts, and one whose records a term before copied: the
    first copy of the term writes nothing, and the partitions wait in a Fetch from then on (not read
    again and again by the task); every record written later lands in step, at the source's offsets."""
    topic = f"{unique_name}.idle"
    create_topic(stack.source, topic, 2)
    produce(stack.source, topic, [(b"k", b"before the mirror")] * 5, partition=1)
    manifest = Manifest(str(tmp_path / "state"), "idle")
    terms, in_step = [], []

    def copy_term(units, extras, term):  # noqa: ANN001 - the mirror's own, its terms and rows counted
        terms.append(term)
        rows = copy_term_here((stack.source, stack.target), units, extras, term)
        in_step.extend(row["in_step"] for row in rows)
        return rows

    with mirrored(stack, manifest, MirrorSpec(re.escape(unique_name) + r"\..*", interval_s=0.5, verify_every_s=2.0,
                                               term_s=4.0), copy_term):
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=120)
        wait_until(lambda: len(terms) >= 2, "a second term", 60)
        wait_for_round(manifest, mirror_status.read(manifest)["round"] + 2, timeout_s=60)
        producer = Producer(stack.source.producer(**{"enable.idempotence": True, "linger.ms": 0}))
        for i in range(20):  # a batch each, on both partitions
            producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=i % 2)
            assert producer.flush(10) == 0
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=120)
    for partition in (0, 1):
        assert records_of(stack.target, topic, partition) == records_of(stack.source, topic, partition)
    assert sum(in_step) == 20, in_step  # none of the 20 copied: each partition was waiting in step


def test_quiet_partitions_wait_apart_from_the_busy_ones_and_come_back_when_written(stack, unique_name, tmp_path,
                                                                                 monkeypatch):
    """A partition that wrote nothing for QUIET_AFTER_S moves to its leader's quiet thread, whose Fetches
    wait QUIET_WAIT_MS; the busy partition's Fetches then name it alone; a record written to the quiet
    one comes at once and brings it back; every record lands in step at its offset."""
    monkeypatch.setattr(stream, "QUIET_AFTER_S", 1.0)
    topic = f"{unique_name}.quiet"
    create_topic(stack.source, topic, 2)
    sent: list[tuple[int, frozenset]] = []
    real = multi.FetchSession.send

    def send(session, conn, positions, **kw):  # noqa: ANN001, ANN003 - what each Fetch in step waits for, and names
        sent.append((kw.get("max_wait_ms"), frozenset(p for t, p in positions if t == topic)))
        return real(session, conn, positions, **kw)

    monkeypatch.setattr(multi.FetchSession, "send", send)
    manifest = Manifest(str(tmp_path / "state"), "quiet")
    in_step: list[int] = []

    def copy_term(units, extras, term):  # noqa: ANN001
        rows = copy_term_here((stack.source, stack.target), units, extras, term)
        in_step.extend(row["in_step"] for row in rows)
        return rows

    producer = Producer(stack.source.producer(**{"enable.idempotence": True, "linger.ms": 0}))
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", interval_s=0.5, verify_every_s=2.0, term_s=60.0)
    with mirrored(stack, manifest, spec, copy_term):
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=120)
        wait_until(lambda: (stream.QUIET_WAIT_MS, frozenset({0, 1})) in sent, "both partitions waiting quietly", 60)
        busy_from = len(sent)
        for i in range(40):  # partition 0 busy for 2 s, 1 quiet
            producer.produce(topic, value=f"busy {i}".encode(), partition=0)
            assert producer.flush(10) == 0
            time.sleep(0.05)  # the writes' pace, not a wait for the mirror
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=60)
        # the first record came on the quiet thread (what it brought written there), then partition 0 moved
        busy = [names for wait, names in sent[busy_from:] if wait != stream.QUIET_WAIT_MS and names]
        assert {0} in busy and len(busy) >= 20, busy
        assert all(names == {0} for names in busy[busy.index({0}):]), busy  # the quiet partition not read with it
        assert (stream.QUIET_WAIT_MS, frozenset({1})) in sent[busy_from:]
        producer.produce(topic, value=b"after the quiet spell", partition=1)
        assert producer.flush(10) == 0
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=60)
    for partition in (0, 1):
        assert records_of(stack.target, topic, partition) == records_of(stack.source, topic, partition)
    assert sum(in_step) == 41, in_step


def test_batches_waiting_after_a_stall_are_joined_and_land_at_their_offsets(stack, unique_name, tmp_path,
                                                                           monkeypatch):
    """The in-step follower held after a Fetch answer (a stalled process, or a DR broker slow to
    answer) while 60 batches of one record each are written; once it goes on they come in one
    answer, are joined, and land at the source's offsets with their content; the batch verification
    settles them byte for byte."""
    topic = f"{unique_name}.burst"
    create_topic(stack.source, topic, 1)
    produce(stack.source, topic, [(b"k", b"before the stall")])
    going, followed = threading.Event(), threading.Event()
    going.set()
    real = multi.FetchSession.receive

    def receive(session, conn):  # noqa: ANN001 - the follower's Fetch answers, held while `going` is clear
        answer = real(session, conn)
        followed.set()
        going.wait(60)
        return answer

    monkeypatch.setattr(multi.FetchSession, "receive", receive)
    manifest = Manifest(str(tmp_path / "state"), "joined")
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", interval_s=0.5, verify_every_s=2.0, term_s=30.0)
    with mirrored(stack, manifest, spec):
        wait_caught_up(manifest, stack.source, {topic: 1}, timeout_s=120)
        produce(stack.source, topic, [(b"k", b"in step")])
        wait_until(followed.is_set, "the partition followed in step", 60)
        going.clear()
        try:
            producer = Producer(stack.source.producer(**{"enable.idempotence": True, "linger.ms": 0}))
            for i in range(60):  # a batch each
                producer.produce(topic, key=f"k{i}".encode(), value=b"v" * i, partition=0,
                                 headers=[("i", str(i).encode())])
                assert producer.flush(10) == 0
        finally:
            going.set()
        wait_caught_up(manifest, stack.source, {topic: 1}, timeout_s=120)
    assert records_of(stack.target, topic, 0) == records_of(stack.source, topic, 0)
    assert mirror_status.read(manifest)["totals"]["joined"] >= 50
    end = len(records_of(stack.source, topic, 0))
    assert batches.compare(stack.source, stack.target, {(topic, 0): (0, end)})[(topic, 0)].end == end


def test_writes_held_while_the_dr_leader_has_not_answered_go_joined_at_their_offsets(stack, unique_name, tmp_path,
                                                                                      monkeypatch):
    """A DR leader slow to answer: while the answer to the in-step follower's one write in flight is
    not read, it goes on fetching, and what each Fetch brings for the three partitions (a batch of one
    record each, 40 a partition) is held, joined to what they held; once the answer is read, the
    next write carries it all. No more than one write a lane (`LANES` connections to the DR leader,
    the partitions spread over them) is unanswered meanwhile, and every record lands at the source's
    offset with its content."""
    topic = f"{unique_name}.held"
    create_topic(stack.source, topic, 3)
    for partition in range(3):
        produce(stack.source, topic, [(b"k", b"before")], partition=partition)
    monkeypatch.setattr(stream, "WRITES_IN_FLIGHT", 1)
    answering, in_step, unanswered = threading.Event(), set(), [0]
    answering.set()
    real_waiting, real_add = wire.BrokerConnection.answer_waiting, stream.Streams.add
    real_send = stream._Writer.send

    def answer_waiting(conn):  # noqa: ANN001 - the DR leader's answers read only while `answering` is set
        return answering.is_set() and real_waiting(conn)

    def add(streams, f, lease):  # noqa: ANN001
        in_step.add(f.unit.partition)
        return real_add(streams, f, lease)

    def send(writer, writes, *args):  # noqa: ANN001
        held = real_send(writer, writes, *args)
        if not answering.is_set():
            unanswered[0] = max(unanswered[0], sum(len(q) for q in writer.pending.values()))
        return held

    monkeypatch.setattr(wire.BrokerConnection, "answer_waiting", answer_waiting)
    monkeypatch.setattr(stream.Streams, "add", add)
    monkeypatch.setattr(stream._Writer, "send", send)
    manifest = Manifest(str(tmp_path / "state"), "held")
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", interval_s=0.5, verify_every_s=2.0, term_s=30.0)
    with mirrored(stack, manifest, spec):
        wait_caught_up(manifest, stack.source, {topic: 3}, timeout_s=120)
        wait_until(lambda: in_step == {0, 1, 2}, "the three partitions followed in step", 60)
        answering.clear()
        try:
            producer = Producer(stack.source.producer(**{"enable.idempotence": True, "linger.ms": 0}))
            for i in range(40):  # a batch each, the follower fetching meanwhile
                for partition in range(3):
                    producer.produce(topic, key=f"k{i}".encode(), value=b"v" * i, partition=partition)
                assert producer.flush(10) == 0
        finally:
            answering.set()
        wait_caught_up(manifest, stack.source, {topic: 3}, timeout_s=120)
    assert unanswered[0] == stream.LANES  # one write in flight a lane, the rest held
    for partition in range(3):
        assert records_of(stack.target, topic, partition) == records_of(stack.source, topic, partition)
    assert mirror_status.read(manifest)["totals"]["joined"] >= 90
