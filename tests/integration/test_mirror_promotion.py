"""An application moved onto the DR cluster while the mirror runs, consumers first, then producers
(kmigrate.run.mirror.producer_moves), on the real stack, the mirror's driver in this process: its
consumer moves and reads on the DR cluster what the mirror copies; its producer stops on the
source, the topic is promoted, the producer goes on on the DR cluster, and the consumer reads its
records at the next offsets: across both moves every record once, in order. A write on the source
to the promoted topic is named as split brain and never copied, by this mirror or by a mirror
started again; a promotion during which the source was written to puts the topic back to the
mirror and says so."""
from __future__ import annotations

import re
import threading

import pytest
from kmigrate.errors import ClusterUnavailable, ConfigError, ProducersActive
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.cutover.snapshot import take_snapshot
from kmigrate.run.mirror import moves, producer_moves
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.spec import MirrorSpec
from kmigrate.run.records.moves import IS_PROMOTED, PROMOTING, promotions, topic_part

from tests.support.apps import Writer, read_as
from tests.support.kafka import create_topic, produce, records_of
from tests.support.mirror import mirrored, wait_caught_up, wait_for_round
from tests.support.steps import failing_in_turn
from tests.support.waiting import wait_until

PARTITIONS = 3


def ends_of(cluster, topic: str) -> dict[int, int]:  # noqa: ANN001
    with ClusterAdmin(cluster) as admin:
        return {p: e for (_, p), e in admin.end_offsets([(topic, p) for p in range(PARTITIONS)]).items()}


@pytest.mark.parametrize("renames", [Renames(), Renames(topic_prefix="dr.", group_prefix="dr-")],
                         ids=["names kept", "renamed"])
def test_an_application_moved_consumers_first_then_producers_reads_every_record_once(stack, unique_name, tmp_path,
                                                                                     renames):
    """Renamed: the mirror keeps the topic and the group under other names on the DR cluster (a
    consolidation target, which holds a topic of the source's name of another team's): the moves go
    to those names, the other team's topic untouched."""
    topic, group = f"{unique_name}.orders", f"{unique_name}-app"
    dr_topic, dr_group = renames.topic(topic), renames.group(group)
    create_topic(stack.source, topic, PARTITIONS)
    if renames:
        create_topic(stack.target, topic, 1)
        produce(stack.target, topic, [(None, b"another team's")])
    manifest = Manifest(str(tmp_path / "state"), "promote")
    spec = MirrorSpec(re.escape(unique_name) + r"\..*", groups=re.escape(group), interval_s=0.5,
                      verify_every_s=2.0, term_s=60.0, renames=renames)
    writer = Writer(stack.source, topic, PARTITIONS)
    read: dict = {}
    with mirrored(stack, manifest, spec):
        wait_for_round(manifest, 1, timeout_s=120)
        writer.start()
        read_as(stack.source, group, topic, read, lambda: sum(map(len, read.values())) >= 200)
        moves.move_group(manifest, stack.source, stack.target, group, wait_s=60)
        dr_writer = Writer(stack.target, dr_topic, PARTITIONS, first=10**6)
        done = threading.Event()
        reading = threading.Thread(target=read_as, args=(stack.target, dr_group, dr_topic, read, done.is_set),
                                   kwargs={"auto.offset.reset": "error"}, daemon=True)
        reading.start()
        wait_until(lambda: sum(map(len, read.values())) >= 400, "the moved consumer reading on the DR cluster", 60)
        writer.stop()  # the producer application stops on the source ...
        row = producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], wait_s=60)
        dr_writer.start()  # ... and goes on on the DR cluster
        assert row["partitions"] == PARTITIONS and not row["promoted_before"] and row["window_s"] < 30, row
        assert list(row["steps_s"]) == ["still", "drained", "verified", "copied_no_more", "restored"], row
        promoted = {int(p): e for p, e in promotions(manifest)[topic]["ends"].items()}
        assert promoted == ends_of(stack.source, topic)
        assert sum(promoted.values()) == writer.sent
        wait_until(lambda: dr_writer.sent >= 300, "the producer writing on the DR cluster", 60)

        # split brain: a record written on the source to the promoted topic is named, and not copied
        produce(stack.source, topic, [(None, b"split")], partition=1)
        status = wait_until(lambda: (s := mirror_status.read(manifest)) and any(
            r["topic"] == topic and r["split_brain"] for r in s.get("promoted", [])) and s, "split brain named", 30)
        [row_of_topic] = [r for r in status["promoted"] if r["topic"] == topic]
        assert row_of_topic["split_brain"] == [{"partition": 1, "records": 1, "first_offset": promoted[1]}]
        assert all(p["topic"] != topic for p in status["partitions"])  # the mirror copies it no more
        dr_writer.stop()
        dr_ends = ends_of(stack.target, dr_topic)
        wait_until(lambda: all(max([o for o, _ in read.get(p, [])], default=-1) + 1 >= dr_ends[p]
                               for p in range(PARTITIONS)), "the consumer read to the DR cluster's ends", 60)
        done.set()
        reading.join(30)
        assert producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], wait_s=10)["promoted_before"]

    # every record once, in order: the source's up to the promoted end, then the DR producer's
    for p in range(PARTITIONS):
        offsets = [o for o, _ in read[p]]
        assert offsets == list(range(dr_ends[p])), f"partition {p}: read {len(offsets)} of {dr_ends[p]}"
        on_dr = records_of(stack.target, dr_topic, p)
        assert on_dr[:promoted[p]] == records_of(stack.source, topic, p, 0, promoted[p]), f"partition {p}"
        assert [v for _, v in read[p]] == [r[2] for r in on_dr], f"partition {p}: values differ"
        assert all(int(r[2]) >= 10**6 for r in on_dr[promoted[p]:]) and len(on_dr) > promoted[p]
    assert b"split" not in {r[2] for r in records_of(stack.target, dr_topic, 1)}
    if renames:  # the other team's topic of the source's name: as it was
        assert [r[2] for r in records_of(stack.target, topic, 0)] == [b"another team's"]

    # a failover of the mirror leaves the promoted topic out (the DR cluster's producers write it)
    with pytest.raises(ConfigError, match=rf"but those promoted on the DR cluster \({re.escape(topic)}\)"):
        take_snapshot(manifest, stack.source, topics_include=re.escape(topic))

    # a mirror started again on the run copies the promoted topic no more, and still names the split brain
    with mirrored(stack, manifest, spec):
        status = wait_for_round(manifest, mirror_status.read(manifest)["round"] + 3, timeout_s=120)
        assert all(p["topic"] != topic for p in status["partitions"])
        [again] = [r for r in status["promoted"] if r["topic"] == topic]
        assert again["from_term"] == 0 and again["split_brain"][0]["records"] == 1
    assert ends_of(stack.target, dr_topic) == dr_ends


def test_a_promotion_refused_while_written_and_when_written_during_it_goes_back_to_the_mirror(
        stack, unique_name, tmp_path, monkeypatch):
    topic, other = f"{unique_name}.orders", f"{unique_name}.elsewhere"
    create_topic(stack.source, topic, PARTITIONS)
    create_topic(stack.source, other, 1)
    produce(stack.source, topic, [(None, b"%d" % i) for i in range(30)])
    manifest = Manifest(str(tmp_path / "state"), "promote-refused")
    with pytest.raises(ConfigError, match="no mirror status"):
        producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], wait_s=1)
    spec = MirrorSpec(re.escape(topic), interval_s=0.5, verify_every_s=2.0, term_s=60.0)
    with mirrored(stack, manifest, spec):
        wait_caught_up(manifest, stack.source, {topic: PARTITIONS}, timeout_s=120)
        with pytest.raises(ConfigError, match=f"does not hold {re.escape(other)}"):
            producer_moves.promote_topics(manifest, stack.source, stack.target, [other], wait_s=1)
        writer = Writer(stack.source, topic, PARTITIONS)
        writer.start()
        try:
            with pytest.raises(ProducersActive, match=r"still written: .*Stop their producers"):
                producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], wait_s=2)
        finally:
            writer.stop()
        assert manifest.read(topic_part(topic))["state"] == PROMOTING

        # a record written on the source after the promotion was recorded, before the mirror left the topic
        real_wait = producer_moves._wait_copied_no_more

        def written_meanwhile(*args, **kwargs):  # noqa: ANN002, ANN003
            produce(stack.source, topic, [(None, b"late")], partition=2)
            return real_wait(*args, **kwargs)

        monkeypatch.setattr(producer_moves, "_wait_copied_no_more", written_meanwhile)
        with pytest.raises(ProducersActive, match=rf"{re.escape(topic)}\[2\]: promoted at \d+, the source ends at"):
            producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], wait_s=30)
        monkeypatch.setattr(producer_moves, "_wait_copied_no_more", real_wait)
        record = manifest.read(topic_part(topic))
        assert record["state"] == PROMOTING and "ends" not in record
        # back to the mirror: it copies the late record, and the move tried again promotes the topic
        wait_caught_up(manifest, stack.source, {topic: PARTITIONS}, timeout_s=120)
        row = producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], wait_s=30)
        assert not row["promoted_before"] and manifest.read(topic_part(topic))["state"] == IS_PROMOTED
    for p in range(PARTITIONS):
        assert records_of(stack.target, topic, p) == records_of(stack.source, topic, p), f"partition {p}"
    assert b"late" in {r[2] for r in records_of(stack.target, topic, 2)}


STEPS = ["_wait_stopped", "wait_held", "_verify", "_wait_copied_no_more", "_check_unwritten", "restore_target_topics"]


def test_a_promotion_failing_at_each_step_in_turn_ends_promoted_with_every_record_equal(stack, unique_name, tmp_path,
                                                                                        monkeypatch):
    topic = f"{unique_name}.orders"
    create_topic(stack.source, topic, PARTITIONS)
    manifest = Manifest(str(tmp_path / "state"), "promote-retried")
    spec = MirrorSpec(re.escape(topic), interval_s=0.5, verify_every_s=2.0, term_s=60.0)
    writer = Writer(stack.source, topic, PARTITIONS)
    with mirrored(stack, manifest, spec):
        wait_for_round(manifest, 1, timeout_s=120)
        writer.start()
        wait_until(lambda: writer.sent >= 500, "the producer writing", 60)
        writer.stop()
        # each attempt fails at the next step; the one after goes on from where it stood
        row, failed = failing_in_turn(monkeypatch, producer_moves, STEPS, ClusterUnavailable, lambda: (
            producer_moves.promote_topics(manifest, stack.source, stack.target, [topic], quiet_s=0.2, wait_s=60)))
        assert not row["promoted_before"] and failed == STEPS, (row, failed)
        status = wait_for_round(manifest, mirror_status.read(manifest)["round"] + 1, timeout_s=60)
        assert all(p["topic"] != topic for p in status["partitions"])
    record = manifest.read(topic_part(topic))
    assert record["state"] == IS_PROMOTED and "ended" in record
    for p in range(PARTITIONS):
        assert records_of(stack.target, topic, p) == records_of(stack.source, topic, p), f"partition {p}"
    assert sum(len(records_of(stack.target, topic, p)) for p in range(PARTITIONS)) == writer.sent
