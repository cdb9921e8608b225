"""A consumer application moved onto the DR cluster while the mirror runs and its producer goes on
writing on the source (kmigrate.run.mirror.moves), on the real stack, the mirror's driver in this
process: the consumer reads on the source, stops, its group is moved, and it goes on on the DR
cluster from exactly where it stopped; across the move it reads every record the producer wrote
once, no record skipped or repeated, each as the source holds it. The mirror syncs the moved group no
more; a move run again finds it moved; a move that cannot finish names what it waits for."""
from __future__ import annotations

import re
import threading

import pytest
from confluent_kafka import Consumer, TopicPartition
from kmigrate.errors import ClusterUnavailable, ConfigError, GroupActive
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.cutover.snapshot import snapshot_groups
from kmigrate.run.mirror import moves, producer_moves
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.spec import MirrorSpec
from kmigrate.run.records.moves import moved_groups, part

from tests.support.apps import Writer, read_as
from tests.support.kafka import create_topic, produce, records_of
from tests.support.mirror import mirrored, wait_caught_up, wait_for_round
from tests.support.steps import failing_in_turn
from tests.support.waiting import wait_until

PARTITIONS = 3


def read_once_each(stack, topic: str, on_source: dict, on_dr: dict) -> None:  # noqa: ANN001
    """Each partition's reads on the source, then on the DR cluster, are every offset the source holds
    once, in order, each record's value as the source holds it."""
    for p in range(PARTITIONS):
        offsets = [o for o, _ in on_source.get(p, [])] + [o for o, _ in on_dr.get(p, [])]
        source = records_of(stack.source, topic, p)
        assert offsets == list(range(len(source))), f"partition {p}: read {len(offsets)} of {len(source)}"
        values = [v for _, v in on_source.get(p, [])] + [v for _, v in on_dr.get(p, [])]
        assert values == [value for _, _, value, _, _ in source], f"partition {p}: values differ"


def test_a_consumer_moved_while_its_producer_writes_reads_every_record_once(stack, unique_name, tmp_path):
    topic, group = f"{unique_name}.orders", f"{unique_name}-app"
    create_topic(stack.source, topic, PARTITIONS)
    manifest = Manifest(str(tmp_path / "state"), "moves")
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", groups=re.escape(group), interval_s=0.5,
                      verify_every_s=2.0, term_s=60.0)
    writer = Writer(stack.source, topic, PARTITIONS)
    with mirrored(stack, manifest, spec):
        wait_for_round(manifest, 1, timeout_s=120)
        writer.start()
        on_source: dict = {}
        read_as(stack.source, group, topic, on_source, lambda: sum(map(len, on_source.values())) >= 300)
        # the mirror synced the group while it ran on the source
        wait_until(lambda: any(g.get("group") == group and "partitions" in g
                               for g in mirror_status.read(manifest)["groups"]), "the group synced", 60)
        row = moves.move_group(manifest, stack.source, stack.target, group, wait_s=60)
        assert row["partitions"] == PARTITIONS and not row["moved_before"] and row["window_s"] < 30, row
        on_dr: dict = {}

        def read_to_the_end() -> bool:  # the writer stopped, and every record it wrote read on one side or the other
            if not writer.stopping.is_set():
                return False
            with ClusterAdmin(stack.source) as admin:
                ends = admin.end_offsets([(topic, p) for p in range(PARTITIONS)])
            return all(max([o for o, _ in on_source.get(p, []) + on_dr.get(p, [])], default=-1) + 1 >= ends[(topic, p)]
                       for p in range(PARTITIONS))

        # no committed offset on the DR cluster would be an error, not a start from either end
        reading = threading.Thread(target=read_as, args=(stack.target, group, topic, on_dr, read_to_the_end),
                                   kwargs={"auto.offset.reset": "error"}, daemon=True)
        reading.start()
        wait_until(lambda: sum(map(len, on_dr.values())) >= 300, "the moved consumer reading on the DR cluster", 60)
        writer.stop()
        wait_caught_up(manifest, stack.source, {topic: PARTITIONS}, timeout_s=120)
        reading.join(120)
        assert not reading.is_alive(), (row, {p: (len(on_source.get(p, [])), len(on_dr.get(p, [])), on_dr.get(p, [(None,)])[-1][0])
                                         for p in range(PARTITIONS)})
        # the mirror syncs the moved group no more: its status names it moved, not synced
        status = wait_for_round(manifest, mirror_status.read(manifest)["round"] + 2, timeout_s=60)
        rows = [g for g in status["groups"] if g.get("group") == group]
        assert len(rows) == 1 and rows[0]["moved"] == "moved" and "partitions" not in rows[0], status["groups"]
        assert moved_groups(manifest)[group]["state"] == "moved"
        assert moves.move_group(manifest, stack.source, stack.target, group, wait_s=10)["moved_before"]
        # a failover of the mirror later leaves the moved group as it is on the DR cluster
        with ClusterAdmin(stack.source) as admin:
            assert group in snapshot_groups(admin, re.escape(group), [topic])
            assert snapshot_groups(admin, re.escape(group), [topic], leave=moved_groups(manifest)) == {}
    read_once_each(stack, topic, on_source, on_dr)
    for p in range(PARTITIONS):
        assert on_dr.get(p), f"partition {p}: nothing read on the DR cluster"
    assert sum(len(records_of(stack.target, topic, p)) for p in range(PARTITIONS)) == writer.sent


def test_a_move_that_waited_in_vain_for_the_group_to_stop_names_its_members_and_goes_on_when_tried_again(
        stack, unique_name, tmp_path):
    topic, group = f"{unique_name}.orders", f"{unique_name}-app"
    create_topic(stack.source, topic, 1)
    produce(stack.source, topic, [(None, b"%d" % i) for i in range(10)])
    manifest = Manifest(str(tmp_path / "state"), "moves-refused")
    with pytest.raises(ConfigError, match="no mirror status"):
        moves.move_group(manifest, stack.source, stack.target, group, wait_s=1)
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", groups=re.escape(group), interval_s=0.5, term_s=60.0)
    with mirrored(stack, manifest, spec):
        wait_for_round(manifest, 1, timeout_s=120)
        consumer = Consumer(stack.source.consumer(**{"group.id": group, "session.timeout.ms": 6000,
                                                     "enable.auto.commit": False}))
        consumer.subscribe([topic])
        read: list = []

        def joined_and_read() -> bool:
            read.extend(m for m in consumer.consume(10, 0.2) if not m.error())
            with ClusterAdmin(stack.source) as admin:
                return len(read) >= 4 and bool(admin.live_members(group))

        try:
            wait_until(joined_and_read, "the consumer in its group, 4 records read", 60)
            consumer.commit(read[3], asynchronous=False)  # offset 4: what it read up to the fourth record
            with pytest.raises(GroupActive, match="no member on the source.*stop its application"):
                moves.move_group(manifest, stack.source, stack.target, group, wait_s=2)
        finally:
            consumer.close()
        row = moves.move_group(manifest, stack.source, stack.target, group, wait_s=60)  # tried again, once stopped
        assert row["partitions"] == 1 and not row["moved_before"], row
        with ClusterAdmin(stack.target) as admin:
            assert admin.committed_offsets(group) == {(topic, 0): 4}


@pytest.mark.parametrize("renames", [Renames(), Renames(topic_prefix="dr.", group_prefix="dr-")],
                         ids=["names kept", "renamed"])
def test_a_moved_group_moves_back_to_the_source_at_its_offsets_there_and_not_once_its_topic_is_promoted(
        stack, unique_name, tmp_path, renames):
    """Renamed: the mirror keeps the topic and the group under other names on the DR cluster, where the
    group moves and is read from on its way back; an offset the group holds there on a topic the mirror
    does not hold stays there."""
    topic, group = f"{unique_name}.orders", f"{unique_name}-app"
    dr_topic, dr_group = renames.topic(topic), renames.group(group)
    create_topic(stack.source, topic, 1)
    produce(stack.source, topic, [(None, b"%d" % i) for i in range(20)])
    _commit(stack.source, group, topic, 10)
    manifest = Manifest(str(tmp_path / "state"), "moves-back")
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", groups=re.escape(group), interval_s=0.5, term_s=60.0,
                      renames=renames)
    with mirrored(stack, manifest, spec):
        wait_caught_up(manifest, stack.source, {topic: 1}, timeout_s=120)
        with pytest.raises(ConfigError, match="was not moved"):
            moves.move_group_back(manifest, stack.source, stack.target, group, wait_s=5)
        moves.move_group(manifest, stack.source, stack.target, group, wait_s=60)
        with ClusterAdmin(stack.target) as admin:
            assert admin.committed_offsets(dr_group) == {(dr_topic, 0): 10}
        _commit(stack.target, dr_group, dr_topic, 15)  # the application read on the DR cluster up to 15
        if renames:  # and a topic of the DR cluster's own, which the mirror does not hold
            own = f"{unique_name}-dr-own"
            create_topic(stack.target, own, 1)
            produce(stack.target, own, [(None, b"x")] * 5)
            _commit(stack.target, dr_group, own, 3)
        row = moves.move_group_back(manifest, stack.source, stack.target, group, wait_s=60)
        assert row["partitions"] == 1, row
        with ClusterAdmin(stack.source) as admin:
            assert admin.committed_offsets(group) == {(topic, 0): 15}
        assert manifest.read(part(group))["state"] == "back" and group not in moved_groups(manifest)
        # the mirror syncs it again from the source
        wait_until(lambda: any(g.get("group") == group and "partitions" in g
                               for g in mirror_status.read(manifest)["groups"]), "the group synced again", 60)
        # moved again, then its topic promoted: it reads on the DR cluster for good
        moves.move_group(manifest, stack.source, stack.target, group, wait_s=60)
        producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], quiet_s=0.2, wait_s=60)
        with pytest.raises(ConfigError, match=rf"{re.escape(topic)}.*promoted"):
            moves.move_group_back(manifest, stack.source, stack.target, group, wait_s=5)


def _commit(cluster, group: str, topic: str, offset: int) -> None:  # noqa: ANN001
    """`group`'s offset on partition 0 of `topic` committed at `offset` by a consumer that then leaves."""
    consumer = Consumer(cluster.consumer(**{"group.id": group, "enable.auto.commit": False}))
    consumer.subscribe([topic])
    try:
        wait_until(lambda: consumer.consume(1, 0.2) is not None and bool(consumer.assignment()), "assigned", 60)
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()


GROUP_STEPS = ["_check_inside", "wait_for", "_wait_no_members", "wait_held", "_check_written"]


def test_a_group_move_failing_at_each_step_in_turn_ends_moved_and_its_consumer_reads_every_record_once(
        stack, unique_name, tmp_path, monkeypatch):
    """Each attempt fails at the next step (the last one after the offsets were written on the DR
    cluster, before the move was recorded); the attempt after goes on from where it stood, and the
    consumer started on the DR cluster reads on from exactly where it stopped on the source."""
    topic, group = f"{unique_name}.orders", f"{unique_name}-app"
    create_topic(stack.source, topic, PARTITIONS)
    manifest = Manifest(str(tmp_path / "state"), "moves-retried")
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", groups=re.escape(group), interval_s=0.5, term_s=60.0)
    writer = Writer(stack.source, topic, PARTITIONS)
    with mirrored(stack, manifest, spec):
        wait_for_round(manifest, 1, timeout_s=120)
        writer.start()
        on_source: dict = {}
        read_as(stack.source, group, topic, on_source, lambda: sum(map(len, on_source.values())) >= 300)

        def left_moving(step: str) -> None:  # refused before the record, at the first step; moving after
            state = (manifest.read(part(group)) or {}).get("state")
            assert state == (None if step == "_check_inside" else "moving"), (step, state)

        row, failed = failing_in_turn(monkeypatch, moves, GROUP_STEPS, ClusterUnavailable, lambda: moves.move_group(
            manifest, stack.source, stack.target, group, wait_s=60), left_moving)
        assert not row["moved_before"] and failed == GROUP_STEPS, (row, failed)
        assert moved_groups(manifest)[group]["state"] == "moved"
        writer.stop()
        wait_caught_up(manifest, stack.source, {topic: PARTITIONS}, timeout_s=120)
        on_dr: dict = {}
        with ClusterAdmin(stack.target) as admin:
            ends = admin.end_offsets([(topic, p) for p in range(PARTITIONS)])
        read_as(stack.target, group, topic, on_dr, lambda: all(
            max([o for o, _ in on_source.get(p, []) + on_dr.get(p, [])], default=-1) + 1 >= ends[(topic, p)]
            for p in range(PARTITIONS)), **{"auto.offset.reset": "error"})
    read_once_each(stack, topic, on_source, on_dr)
