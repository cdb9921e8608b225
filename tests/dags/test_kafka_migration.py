"""The kafka_migration DAG run with `dag.test()` on the real local stack: a mixed workload moves
with every record at its offset, consumer groups and connectors continue exactly, a copy killed
mid-way is retried by Airflow, and bad parameters are refused before anything is written."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.cutover import events
from kmigrate.run.copying.plan import latest_copy_rows, work_units, write_pre_copy_plan
from kmigrate.run.report.markdown import summarize
from kmigrate.run.checks.selection import Selection
from kmigrate.run.targets.prepare import prepare_targets
from kmigrate_demo.workload import seed_mixed

from tests.integration.test_copier import assert_same_partition, records_of, seed_plain
from tests.integration.test_offsets import assert_exactly, consume_group, expected_after
from tests.integration.test_spark_jobs import load_spark_cluster_module
from tests.integration.test_stack_connect import wait_until
from tests.kafka_helpers import produce, read_partition
from tests.kill_hook import kill_hook_env


def all_watermarks(cluster, topics: dict[str, int]) -> dict:
    with ClusterAdmin(cluster) as admin:
        return {(t, p): admin.watermarks(t, p) for t, n in topics.items() for p in range(n)}


def assert_migrated_exactly(source, target, topics: dict[str, int], groups, source_before: dict) -> None:
    """The source untouched since `source_before` (its watermarks then); on the target every partition
    with the same log start and end and every read_committed-visible record at its offset (key, value,
    headers, timestamp); each of `groups` committed at the same offsets."""
    assert all_watermarks(source, topics) == source_before  # the source was never written to
    for (topic, partition), marks in source_before.items():
        with ClusterAdmin(target) as admin:
            assert admin.watermarks(topic, partition) == marks  # log start and end, offset for offset
        assert records_of(target, topic, partition) == records_of(source, topic, partition)
    with ClusterAdmin(source) as on_source, ClusterAdmin(target) as on_target:
        for group in groups:
            assert on_target.committed(group) == on_source.committed(group)


def delete_connectors(clients, names) -> None:
    """Delete each of `names` wherever it exists among the Connect `clients`."""
    for client in clients:
        for name in names:
            if name in client.connectors():
                client.delete(name)


# Target topic configs that may differ from the source's after a migration, and why: none today
# (the copy's own settings are restored, and both local clusters run the same broker defaults).
CONFIGS_ALLOWED_TO_DIFFER: frozenset[str] = frozenset()


def assert_same_topic_configs(stack, topics) -> None:
    """Every effective config of each topic equal on both clusters, but CONFIGS_ALLOWED_TO_DIFFER."""
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic in topics:
            on_source, on_target = source.topic_configs(topic), target.topic_configs(topic)
            differ = {k: (on_source.get(k), on_target.get(k)) for k in set(on_source) | set(on_target)
                      if on_source.get(k) != on_target.get(k) and k not in CONFIGS_ALLOWED_TO_DIFFER}
            assert not differ, f"{topic}: source vs target {differ}"


def run_dag(dagbag, dag_id: str = "kafka_migration", **conf):
    """One `dag.test()` run of a freshly parsed DAG: a run's conf stays in the DAG object's params."""
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=dagbag.dag_folder).get_dag(dag_id)
    return dag.test(run_conf=conf)


def task_states(run) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in run.get_task_instances()}


@pytest.fixture
def workload(stack, tmp_path):
    prefix = f"dagtest{uuid.uuid4().hex[:6]}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=300)
    yield w
    delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))


def test_migration_of_a_mixed_workload_then_a_rerun_is_a_noop(stack, dagbag, workload, tmp_path, capfd):
    w = workload
    state = tmp_path / "state"
    conf = {"topics_include": w.topic_pattern, "groups": w.group_pattern,
            "connectors": [w.source_connector, w.sink_connector],
            "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
            "quiesce_seconds": 2, "state_location": str(state), "run_name": "mixed"}
    source_before = all_watermarks(stack.source, w.topics)

    run = run_dag(dagbag, **conf)
    assert str(run.state) == "success", task_states(run)
    summary = summarize(Manifest(str(state), "mixed"))
    assert summary["partitions"] == sum(w.topics.values()) == summary["partitions_equal"]
    assert summary["groups"] == summary["groups_exact"] == 2
    assert summary["connectors"] == summary["connectors_resumed"] == 2
    assert summary["fillers"] > 0  # the audit topic's log start and the aborted transactions
    assert (state / "mixed" / "report.md").read_text().startswith("# Migration report: mixed")
    assert (state / "mixed" / "copy-times.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (state / "mixed" / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every offset verified; the pre-copied ranges while the source was live, then only the rest
    assert summary["verified_records_pct"] == 100.0
    assert summary["verified_live_partitions"] == summary["partitions"]
    assert summary["pre_copy_rounds"] and summary["pre_copy_rounds"][0]["round"] == 1
    window = {row["step"]: row["seconds"] for row in summary["window"]}
    assert set(window) >= {"stop_connectors", "quiesce", "snapshot", "copy", "verify", "resume_connectors",
                           "between steps"}
    assert abs(sum(window.values()) - summary["downtime_s"]) < 0.01
    assert "## Cutover window" in (state / "mixed" / "report.md").read_text()
    per_topic = [ti for ti in run.get_task_instances() if ti.task_id == "topic_result"]
    assert sorted(ti.rendered_map_index for ti in per_topic) == sorted(w.topics)  # one grid cell per topic
    assert {str(ti.state) for ti in per_topic} == {"success"}
    # the payments partitions' log starts sit on a commit and an abort marker
    assert_migrated_exactly(stack.source, stack.target, w.topics, w.groups, source_before)
    assert source_before[(w.topic("payments"), 0)][0] == 20 and source_before[(w.topic("payments"), 1)][0] == 13
    assert_same_topic_configs(stack, w.topics)  # LogAppendTime on clicks among them
    with ClusterAdmin(stack.target) as target:
        for group in w.groups:  # offsets (equal above) and their metadata
            # byte for byte as the source holds it (checked above): the workload committed through librdkafka,
            # which stores a metadata with a zero byte after it
            assert {c.metadata.rstrip("\0") for c in target.committed(group).values()} == {w.group_metadata[group]}

    # the run's name triggered again with other params: refused before anything is done
    capfd.readouterr()
    other = run_dag(dagbag, **{**conf, "quiesce_seconds": 3})
    assert str(other.state) == "failed" and task_states(other)["preflight"] == "failed", task_states(other)
    assert {task_states(other)[t] for t in ("stop_connectors", "snapshot", "copy_and_verify")} <= {"None", "upstream_failed"}
    assert "run 'mixed' was started with other params (quiesce_seconds: 2 then, 3 now)" in "".join(capfd.readouterr())

    # consumers continue on the target exactly at the next unread record
    for group, topics in w.groups.items():
        for topic, positions in topics.items():
            got = consume_group(stack.target, group, topic, w.topics[topic])
            assert_exactly([g for g in got if g[0] in positions], expected_after(stack, topic, positions))

    # the file source continues on the target with the lines written after the migration
    with w.source_file.open("a") as handle:
        handle.write("".join(f"line {i:04d}\n" for i in range(100, 120)))
    lines = w.topic("lines")
    wait_until(lambda: len(read_partition(stack.target, lines)) == 120, "120 lines on the target")
    assert [v.decode() for _, _, v in read_partition(stack.target, lines)] == [f"line {i:04d}" for i in range(120)]
    # the file sink continues on the target with exactly the records after its committed offsets
    producer = Producer(stack.target.producer())
    for i in range(5):
        producer.produce(w.topic("orders"), key=b"new", value=f"new order {i}".encode(), partition=0)
    producer.flush(30)
    wait_until(lambda: w.sink_file_target.exists() and len(w.sink_file_target.read_text().splitlines()) == 5,
               "the sink on the target to write the 5 new orders")
    assert w.sink_file_target.read_text().splitlines() == [f"new order {i}" for i in range(5)]

    # consumers on the target commit newer offsets; the finished run, run again, changes nothing:
    # no offset moved back, no connector stopped or restarted, nothing copied or verified again
    group, topics = next(iter(w.groups.items()))
    topic = next(iter(topics))
    with ClusterAdmin(stack.target) as target:
        committed = target.committed(group)
    newer = Consumer(stack.target.consumer(group))
    newer.commit(offsets=[TopicPartition(topic, 0, committed[(topic, 0)].offset + 3)], asynchronous=False)
    newer.close()
    sink_group = f"connect-{w.sink_connector}"
    with ClusterAdmin(stack.target) as target:
        orders_end = target.watermarks(w.topic("orders"), 0)[1]
        wait_until(lambda: target.committed(sink_group)[(w.topic("orders"), 0)].offset == orders_end,
                   "the sink to commit the new orders on the target")
        before = {g: target.committed(g) for g in [*w.groups, sink_group]}
    assert before[group][(topic, 0)].offset == committed[(topic, 0)].offset + 3
    assert before[sink_group]  # the sink committed on the target
    manifest = Manifest(str(state), "mixed")
    parts = manifest.parts()
    again = run_dag(dagbag, **conf)
    assert str(again.state) == "success", task_states(again)
    with ClusterAdmin(stack.target) as target:
        assert {g: target.committed(g) for g in before} == before
    assert stack.target_connect.state(w.source_connector) == stack.target_connect.state(w.sink_connector) == "RUNNING"
    assert stack.source_connect.state(w.source_connector) == stack.source_connect.state(w.sink_connector) == "STOPPED"
    new_parts = set(manifest.parts()) - set(parts)
    assert not {p for p in new_parts if p.startswith(("copy-results/", "verification/", "group-replication/",
                                                      "connector-migration/"))}, new_parts
    assert "- Status: finished: resumed on the target" in (state / "mixed" / "report.md").read_text()



def test_a_copy_killed_mid_way_resumes_and_the_run_succeeds(stack, dagbag, tmp_path, monkeypatch):
    topic = f"dagkill{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=3000, **{"batch.num.messages": 100})
    markers = tmp_path / "killed"
    markers.mkdir()
    for name, value in kill_hook_env(1000, markers).items():  # spark-submit and its Python workers inherit them
        monkeypatch.setenv(name, value)
    state = tmp_path / "state"
    run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), pre_copy=False, quiesce_seconds=1,
                  state_location=str(state), run_name="killed")
    assert str(run.state) == "success", task_states(run)
    assert sorted(p.name for p in markers.iterdir()) == [f"{topic}-0", f"{topic}-1"]
    # A killed task stops the copy's Spark job (local: one attempt a task); the job runs the
    # partitions without a result again one job each, and one killed there fails the job, which
    # Airflow retries. Which of the two resumes a partition depends on timing: the rows show that
    # one did.
    manifest = Manifest(str(state), "killed")
    assert summarize(manifest)["partitions_equal"] == 2  # verified: every offset once, nothing missing
    for row in latest_copy_rows(manifest).values():  # the retry resumed where the killed attempt stopped
        assert 1000 <= row["target_start"] < 3000 and row["records"] == 3000 - row["target_start"]


def test_connectors_keep_their_state_through_a_migration_and_a_rollback(stack, dagbag, tmp_path):
    """A running and a paused connector: after the migration the target copies are running and
    paused, the originals stopped; after the rollback the target copies are stopped, the originals
    running and paused again."""
    from kmigrate_demo.workload import FILE_SOURCE

    from tests.kafka_helpers import create_topic, watermarks

    prefix = f"dagroll{uuid.uuid4().hex[:6]}"
    topic, running, paused = f"{prefix}.lines", f"{prefix}-running", f"{prefix}-paused"
    data = tmp_path / "input.txt"
    data.write_text("".join(f"line {i}\n" for i in range(10)))
    create_topic(stack.source, topic)
    for name in (running, paused):
        stack.source_connect.create(name, {"connector.class": FILE_SOURCE, "tasks.max": "1", "file": str(data),
                                           "topic": topic})
    try:
        wait_until(lambda: watermarks(stack.source, topic)[1] == 20, "10 lines from each connector on the source")
        stack.source_connect.pause(paused)  # as an operator does while something downstream is down
        stack.source_connect.wait_for(paused, lambda st: st["connector"]["state"] == "PAUSED", "PAUSED", 30)
        state = str(tmp_path / "state")
        run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), connectors=[running, paused], pre_copy=False,
                      quiesce_seconds=1, state_location=state, run_name="roll")
        assert str(run.state) == "success", task_states(run)
        assert stack.target_connect.state(running) == "RUNNING" and stack.target_connect.state(paused) == "PAUSED"
        assert stack.source_connect.state(running) == stack.source_connect.state(paused) == "STOPPED"
        summary = summarize(Manifest(state, "roll"))
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        report = (Path(state) / "roll" / "report.md").read_text()
        assert f"| {paused} | source | 1 | PAUSED | PAUSED |" in report

        # the target is in use now: someone pauses the running copy there; the finished run, run
        # again, changes nothing on either side (before, its resume step ran the connector again)
        stack.target_connect.pause(running)
        stack.target_connect.wait_for(running, lambda st: st["connector"]["state"] == "PAUSED", "PAUSED", 30)
        again = run_dag(dagbag, topics_include=topic.replace(".", r"\."), connectors=[running, paused],
                        pre_copy=False, quiesce_seconds=1, state_location=state, run_name="roll")
        assert str(again.state) == "success", task_states(again)
        assert stack.target_connect.state(running) == stack.target_connect.state(paused) == "PAUSED"
        assert stack.source_connect.state(running) == stack.source_connect.state(paused) == "STOPPED"

        for _ in range(2):  # idempotent
            back = run_dag(dagbag, "kafka_migration_rollback", run_name="roll", state_location=state)
            assert str(back.state) == "success", task_states(back)
        assert stack.target_connect.state(running) == stack.target_connect.state(paused) == "STOPPED"
        assert stack.source_connect.state(running) == "RUNNING" and stack.source_connect.state(paused) == "PAUSED"
        with data.open("a") as handle:
            handle.write("after the rollback\n")
        wait_until(lambda: watermarks(stack.source, topic)[1] == 21, "the running source connector to run again")
        assert watermarks(stack.target, topic)[1] == 20  # the stopped target copies wrote nothing more
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), (running, paused))


def test_a_group_still_consuming_on_the_source_fails_the_run_before_resuming_and_migrates_once_stopped(
        stack, dagbag, tmp_path, capfd):
    topic = f"daglive{uuid.uuid4().hex[:6]}.events"
    group = f"{topic}.reader"
    seed_plain(stack.source, topic, partitions=1, per_partition=2000)
    stop = threading.Event()

    def consume() -> None:  # a consumer that reads and commits until told to stop
        consumer = Consumer(stack.source.consumer(group, **{"auto.offset.reset": "earliest"}))
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                msg = consumer.poll(0.1)
                if msg is not None and not msg.error():
                    consumer.commit(msg, asynchronous=False)
        finally:
            consumer.close()  # leaves the group

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    try:
        with ClusterAdmin(stack.source) as admin:
            wait_until(lambda: admin.describe_group(group)["members"] and admin.committed_offsets(group),
                       "the consumer to join and commit")
        conf = {"topics_include": topic.replace(".", r"\."), "groups": rf"{topic}\.reader".replace(".", r"\.", 1),
                "pre_copy": False, "quiesce_seconds": 2, "member_session_timeout_s": 4,
                "state_location": str(tmp_path / "state")}
        capfd.readouterr()
        run = run_dag(dagbag, run_name="live", **conf)
        out = "".join(capfd.readouterr())
        states = task_states(run)
        assert str(run.state) == "failed" and states["quiesce"] == "failed", states
        assert states["resume_connectors"] in ("None", "upstream_failed") and states["replicate_groups"] != "success"
        assert f"consumer group '{group}'" in out and "still consumes on the source" in out
        with ClusterAdmin(stack.target) as target:
            assert target.committed_offsets(group) == {}  # nothing replicated and called exact
    finally:
        stop.set()
        consumer.join(30)
    assert not consumer.is_alive()

    # another run over the same topics: refused in its preflight while the failed run holds them
    capfd.readouterr()
    refused = run_dag(dagbag, run_name="stopped", **conf)
    out = "".join(capfd.readouterr())
    assert str(refused.state) == "failed" and task_states(refused)["preflight"] == "failed"
    assert "run 'live' of DAG 'kafka_migration'" in out and f"holds {topic}" in out
    released = subprocess.run([sys.executable, "-m", "kmigrate.claims", "release", "live", "--bootstrap-servers",
                               stack.target.bootstrap_servers], capture_output=True, text=True, timeout=60)
    assert released.returncode == 0 and "its topics are released" in released.stdout, released.stderr[-2000:]

    run = run_dag(dagbag, run_name="stopped", **conf)  # the same group, its consumer stopped in time
    assert str(run.state) == "success", task_states(run)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        assert target.committed(group) == source.committed(group) != {}
    summary = summarize(Manifest(conf["state_location"], "stopped"))
    assert summary["groups"] == summary["groups_exact"] == 1


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
                                                                                         capfd):
    """A producer nobody stopped writes 3 records right after the snapshot: the copy job's
    verification fails the run, once (no retry can help), naming the partition and the count, and
    nothing resumes on the target."""
    topic = f"daglate{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=300)
    state = str(tmp_path / "state")
    manifest = Manifest(state, "late")
    wrote = threading.Event()

    def write_after_the_snapshot() -> None:
        wait_until(lambda: manifest.exists(Part.SNAPSHOT), "the run's snapshot", timeout_s=120, poll_s=0.02)
        produce(stack.source, topic, [(b"late", b"after the snapshot")] * 3, 1)
        wrote.set()

    writer = threading.Thread(target=write_after_the_snapshot, daemon=True)
    writer.start()
    capfd.readouterr()
    run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), quiesce_seconds=1, state_location=state,
                  run_name="late")
    out = "".join(capfd.readouterr())
    writer.join(30)
    assert wrote.is_set()
    states = task_states(run)
    assert str(run.state) == "failed" and states["copy_and_verify"] == "failed", states
    assert states["resume_connectors"] in ("None", "upstream_failed"), states
    copy_tries = [ti.try_number for ti in run.get_task_instances() if ti.task_id == "copy_and_verify"]
    assert copy_tries == [1], copy_tries  # refused, not retried
    assert f"the target would miss 3 records ({topic}[1]: 3 records)" in out
    assert not events.finished(manifest) and summarize(manifest)["downtime_s"] is None


def test_a_scheduled_cutover_stops_no_earlier_and_keeps_the_target_one_round_behind_until_then(
        stack, dagbag, tmp_path, monkeypatch):
    """cutover_at a minute ahead, a producer writing 50 records/s until the connectors stop (as its
    owner stops it at the cutover): the connectors stop no earlier than that time, and meanwhile a
    catch-up round every 10 s keeps the target's lag within what the source writes in one round's
    time (without them it would grow to the whole minute's writes)."""
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
                time.sleep(0.5)

    writer = threading.Thread(target=write_and_watch, daemon=True)
    cutover_at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=60)
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
    # the pre-copy, then catch-up rounds (each a spark-submit job here, then 10 s until the next poke)
    assert len(rounds) >= 3 and [r["round"] for r in rounds] == list(range(1, len(rounds) + 1)), rounds
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
    # and it moved: the lag while waiting stayed below the minute's writes
    assert max(source_end - target_end for at, source_end, target_end in ends if at > finished[0][0]) < 50 * 45


def test_dr_drills_measure_rpo_and_rto_and_a_second_drill_copies_only_new_records(stack, dagbag, tmp_path):
    topic = f"dagdrill{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=500)
    state = tmp_path / "state"
    conf = {"topics_include": topic.replace(".", r"\."), "state_location": str(state)}

    first = run_dag(dagbag, "kafka_dr_drill", **conf)
    assert str(first.state) == "success", task_states(first)
    produce(stack.source, topic, [(b"late", b"after the first drill")] * 7, 1)
    second = run_dag(dagbag, "kafka_dr_drill", **conf)
    assert str(second.state) == "success", task_states(second)

    for run, new_records in ((first, 1000), (second, 7)):
        manifest = Manifest(str(state), run.run_id)
        summary = summarize(manifest)
        assert summary["partitions_equal"] == 2 and summary["records"] == new_records
        drill = manifest.read("drill")
        assert drill["rpo_records"] >= 0 and drill["rpo_seconds"] >= 0 and 0 < drill["rto_seconds"] < 600
        assert "RTO" in (state / run.run_id / "report.md").read_text()
    with ClusterAdmin(stack.target) as target, ClusterAdmin(stack.source) as source:
        assert [target.watermarks(topic, p) for p in (0, 1)] == [source.watermarks(topic, p) for p in (0, 1)]


def test_a_dr_drill_runs_its_spark_jobs_on_a_spark_connect_server(stack, dagbag, tmp_path, capfd):
    """spark_remote: the copy and verify jobs run as Python clients of a Spark Connect server
    (started here on this test's own ports, stopped by pid), with no spark-submit."""
    module = load_spark_cluster_module()
    remote = "sc://127.0.0.1:30102"
    server = module.connect_service(tmp_path / "spark", "local[2]", 30102, 30140, Path(sys.executable))
    assert module.connect_up(server, Path(sys.executable), timeout_s=120)
    try:
        topic = f"dagremote{uuid.uuid4().hex[:6]}.events"
        seed_plain(stack.source, topic, partitions=2, per_partition=500)
        state = tmp_path / "state"
        capfd.readouterr()
        run = run_dag(dagbag, "kafka_dr_drill", topics_include=topic.replace(".", r"\."), state_location=str(state),
                      spark_remote=remote)
        log = "".join(capfd.readouterr())
        assert str(run.state) == "success", task_states(run)
    finally:
        module.down([server])
    assert server.pid() is None
    assert log.count(f"Spark session on {remote}") == 2, log[-3000:]  # the copy job and the verify job
    assert "Spark-Submit cmd" not in log  # what SparkSubmitHook logs when it launches spark-submit
    summary = summarize(Manifest(str(state), run.run_id))
    assert summary["partitions_equal"] == 2 and summary["records"] == 1000
    durations = {ti.task_id: round(ti.duration or 0, 1) for ti in run.get_task_instances() if ti.task_id in ("copy", "verify")}
    print(f"on the Spark Connect server: {durations} s")


def test_a_spark_remote_that_is_not_a_spark_connect_url_is_refused(dagbag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError):
        run_dag(dagbag, "kafka_dr_drill", topics_include="x", spark_remote="http://spark:7077")
