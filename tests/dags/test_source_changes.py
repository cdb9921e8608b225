"""The kafka_migration DAG (`dag.test()`, real stack) while the source changes around the cutover: a
topic that grows (partitions, a config) after the pre-copy ends equal; a record written after the
snapshot fails the run before anything resumes; a scheduled cutover stops no earlier than its time
and keeps the target one round behind a live producer until then."""
from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.selection import Selection
from kmigrate.run.copying.plan import work_units, write_pre_copy_plan
from kmigrate.run.records import events
from kmigrate.run.report.markdown import summarize
from kmigrate.run.targets.prepare import prepare_targets

from tests.support.airflow import run_dag, task_states, window_cells
from tests.support.kafka import produce, seed_plain
from tests.support.migration import assert_same_partition, assert_same_topic_configs
from tests.support.waiting import wait_until


def test_a_topic_that_grows_on_the_source_after_the_pre_copy_ends_equal(stack, dagbag, tmp_path):
    """The pre-copy creates the target topic with 2 partitions; before the cutover the source topic
    gets 4 and another retention.ms. The run applies both to the topic it created, at the snapshot,
    and copies every partition."""
    topic = f"daggrow{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=200)
    state = str(tmp_path / "state")
    manifest = Manifest(state, "grow")
    # the pre-copy as the DAG's pre-copy task and job do it, before anything else of the run
    selection = Selection(topic.replace(".", r"\."))
    plan = write_pre_copy_plan(manifest, stack.source, [topic], selection.modes([topic]))
    units = work_units(plan)
    prepare_targets(stack.source, stack.target, units, manifest=manifest)
    for unit in units:
        assert copy_partition(stack.source, stack.target, unit, CopyOptions(verify=False)).records == 200

    with ClusterAdmin(stack.source) as admin:
        admin.add_partitions(topic, 4)
        admin.alter_topic_configs(topic, {"retention.ms": "86400000"})
    for partition in range(4):
        produce(stack.source, topic, [(b"late", f"after the pre-copy {partition}".encode())] * 5, partition)

    run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), quiesce_seconds=1, state_location=state,
                  run_name="grow")
    assert str(run.state) == "success", task_states(run)
    for partition in range(4):
        assert_same_partition(stack, topic, partition)
    assert_same_topic_configs(stack, [topic])
    summary = summarize(manifest)
    assert summary["partitions"] == summary["partitions_equal"] == 4
    assert summary["topic_changes"] == {topic: {"partitions": [2, 4],
                                                "configs": {"retention.ms": ["604800000", "86400000"]}}}
    assert "| 2 -> 4 | retention.ms: 604800000 -> 86400000 |" in (Path(state) / "grow" / "report.md").read_text()


def test_a_record_written_to_the_source_after_the_snapshot_fails_the_run_before_resuming(stack, dagbag, tmp_path,
                                                                                         capfd, monkeypatch):
    """A producer nobody stopped writes 3 records right after the snapshot, before the copy job
    starts: the copy job's verification fails the run, once (no retry can help), naming the
    partition and the count, and nothing resumes on the target."""
    from kmigrate.run.window import steps

    topic = f"daglate{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=300)
    state = str(tmp_path / "state")
    manifest = Manifest(state, "late")
    wrote = threading.Event()
    take_snapshot = steps.take_snapshot

    def then_write(*args, **kwargs):  # the snapshot step takes it, then the producer writes, then the window goes on
        taken = take_snapshot(*args, **kwargs)
        produce(stack.source, topic, [(b"late", b"after the snapshot")] * 3, 1)
        wrote.set()
        return taken

    monkeypatch.setattr(steps, "take_snapshot", then_write)
    capfd.readouterr()
    run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), quiesce_seconds=1, state_location=state,
                  run_name="late")
    out = "".join(capfd.readouterr())
    assert wrote.is_set()
    states = task_states(run)
    cells = window_cells(run)
    assert str(run.state) == "failed" and states["cutover"] == "failed" and cells["copy_and_verify"] == "failed", cells
    assert cells["resume_connectors"] == "skipped", cells
    tries = [ti.try_number for ti in run.get_task_instances() if ti.task_id == "cutover"]
    assert tries == [1], tries  # refused, not retried
    assert f"the target would miss 3 records ({topic}[1]: 3 records)" in out
    assert not events.finished(manifest) and summarize(manifest)["downtime_s"] is None


def test_a_scheduled_cutover_stops_no_earlier_and_keeps_the_target_one_round_behind_until_then(
        stack, dagbag, tmp_path, monkeypatch):
    """cutover_at 90 s ahead, a producer writing 50 records/s until the connectors stop (as its
    owner stops it at the cutover): the connectors stop no earlier than that time, and meanwhile a
    catch-up round every 10 s keeps the target's lag within what the source writes in one round's
    time (without them it would grow to all 90 s of writes)."""
    import datetime

    from kmigrate_airflow.operators import CATCH_UP_ENV

    monkeypatch.setenv(CATCH_UP_ENV, "10")
    topic = f"dagcut{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=200)
    state = str(tmp_path / "state")
    manifest = Manifest(state, "scheduled")
    stopped = lambda: manifest.exists(Part.event(events.STOPPED))  # noqa: E731
    ends: list[tuple[float, int, int]] = []  # (when, source end, target end), both partitions summed

    def write_and_watch() -> None:  # 50 records/s; both ends sampled every 0.5 s
        producer = Producer(stack.source.producer(**{"linger.ms": 5}))
        written, began = 0, time.monotonic()
        keys = [(topic, 0), (topic, 1)]
        with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
            while not stopped() and time.monotonic() - began < 300:
                while written < (time.monotonic() - began) * 50:
                    producer.produce(topic, value=b"live %d" % written, partition=written % 2)
                    written += 1
                producer.flush(10)
                try:
                    ends.append((time.time(), sum(source.end_offsets(keys).values()),
                                 sum(target.end_offsets(keys).values())))
                except Exception:  # noqa: BLE001 - until the pre-copy has created the target topic
                    pass
                time.sleep(0.5)  # the writer's pace and the sampling interval (the scenario, not a wait)

    writer = threading.Thread(target=write_and_watch, daemon=True)
    # 90 s: on a slow machine the pre-copy (a spark-submit job) took 28 s, and a minute held too few
    # samples after the first catch-up round to show the target following
    cutover_at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=90)
    writer.start()
    run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), quiesce_seconds=1, state_location=state,
                  run_name="scheduled", cutover_at=cutover_at.isoformat())
    writer.join(30)
    assert str(run.state) == "success", task_states(run)
    assert summarize(manifest)["partitions_equal"] == 2
    stop = datetime.datetime.fromisoformat(manifest.read(Part.event(events.STOPPED))["at"])
    assert cutover_at <= stop < cutover_at + datetime.timedelta(seconds=15), (cutover_at, stop)
    rounds = sorted((manifest.read(p) for p in manifest.parts() if p.startswith("pre-copy-rounds/")),
                    key=lambda r: r["started"])
    # the pre-copy, then catch-up rounds (each a spark-submit job here, then 10 s until the next poke;
    # none that would end past the time)
    assert len(rounds) >= 2 and [r["round"] for r in rounds] == list(range(1, len(rounds) + 1)), rounds
    parse = datetime.datetime.fromisoformat
    # each round copied up to the source's end when it began (within the sampling's half second)
    for r in rounds[1:]:
        before = [source_end for at, source_end, _ in ends if at <= parse(r["started"]).timestamp() - 0.6]
        assert before and r["planned_end"] >= before[-1], (r, before[-1:])
    # from the first catch-up round on, the target always held what the last finished round planned:
    # one round behind the source, never more
    finished = [(parse(r["ended"]).timestamp(), r["planned_end"]) for r in rounds[1:]]
    checked = 0
    for at, _, target_end in ends:
        done = [planned for ended, planned in finished if ended <= at]
        if done:
            assert target_end >= done[-1], (at, target_end, done[-1])
            checked += 1
    assert checked >= 10
    # and it moved: each catch-up round planned past the round before it, the last one by at least
    # 10 s of writes past the pre-copy (without them the target would stay at the pre-copy's end). A
    # bound in seconds would depend on how long a round's job takes on the machine.
    planned = [r["planned_end"] for r in rounds]
    assert planned == sorted(set(planned)) and planned[-1] >= planned[0] + 50 * 10, planned
