"""The kafka_migration DAG run with `dag.test()` on the real local stack: a mixed workload moves
with every record at its offset, consumer groups and connectors continue exactly, a copy killed
mid-way is retried by Airflow, connectors keep their states through a migration and a rollback, and
a group still consuming on the source fails the run before anything resumes. The source changing
around the cutover: test_source_changes.py; the DR drill DAG: test_dr_drill.py."""
from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.copying.plan import latest_copy_rows
from kmigrate.run.cutover import course
from kmigrate.run.report.markdown import summarize
from kmigrate_demo.workload import seed_mixed

from tests.support.airflow import run_dag, task_states, window_cells
from tests.support.monitoring import run_panels_answered
from tests.support.connect import delete_connectors
from tests.support.kafka import create_topic, seed_plain, watermarks
from tests.support.kill_hook import kill_hook_env
from tests.support.migration import (
    assert_migrated_exactly,
    assert_same_topic_configs,
    assert_workload_continues_on_target,
    partition_watermarks,
)
from tests.support.waiting import wait_until


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
    source_before = partition_watermarks(stack.source, w.topics)

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
    # the window's steps back to back in one task: the seconds inside no step are the course's bookkeeping
    assert window["between steps"] < 1.0 and sum(window.values()) >= summary["downtime_s"] - 0.01, window
    assert window_cells(run) == dict.fromkeys(course.STEPS, "success")  # one grid cell per window step
    assert "## Cutover window" in (state / "mixed" / "report.md").read_text()

    def metrics(read) -> None:  # noqa: ANN001 - the run's metrics as a real Prometheus holds them
        r = 'run="mixed"'
        assert read(f"kmigrate_run_copy_offsets_to_go{{{r}}}") == read(f"kmigrate_run_copy_partitions_to_go{{{r}}}") == 0
        assert read(f"kmigrate_run_verified_partitions{{{r}}}") == summary["partitions"]
        assert read(f"kmigrate_run_unequal_partitions{{{r}}}") == 0
        assert read(f"kmigrate_run_downtime_seconds{{{r}}}") == summary["downtime_s"]
        assert read(f'kmigrate_run_step_seconds{{{r},step="copy"}}') == window["copy"]
        assert read(f'kmigrate_run_phase{{{r},phase="resume_connectors"}}') == 1
    queries, answered = run_panels_answered(tmp_path / "prometheus", str(state), "mixed", port=17191,
                                            exporter_port=17569, check=metrics)
    recovery = [q for q in queries if "_rpo_" in q or "_rto_" in q]  # a drill's or failover's (test_dr_drill)
    assert recovery and sorted(answered) == sorted(set(queries) - set(recovery)), sorted(set(queries) - set(answered))
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
    assert task_states(other)["cutover"] in ("None", "upstream_failed")
    assert "run 'mixed' was started with other params (quiesce_seconds: 2 then, 3 now)" in "".join(capfd.readouterr())

    assert_workload_continues_on_target(stack, w)

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
    # under spark-submit, whose Python workers inherit the kill hook's environment (a Spark Connect
    # server's do not)
    run = run_dag(dagbag, topics_include=topic.replace(".", r"\."), pre_copy=False, quiesce_seconds=1,
                  state_location=str(state), run_name="killed", spark_connect_conn_id=None)
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
        cells = window_cells(run)
        assert str(run.state) == "failed" and states["cutover"] == "failed" and cells["quiesce"] == "failed", cells
        assert cells["resume_connectors"] == cells["replicate_groups"] == "skipped", cells
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
    released = subprocess.run([sys.executable, "-m", "kmigrate.claims", "release", "live", "--force",
                               "--bootstrap-servers", stack.target.bootstrap_servers], capture_output=True, text=True,
                              timeout=60)  # the held run's claim is its deployment's: released by hand, named
    assert released.returncode == 0 and "its topics are released" in released.stdout, released.stderr[-2000:]

    run = run_dag(dagbag, run_name="stopped", **conf)  # the same group, its consumer stopped in time
    assert str(run.state) == "success", task_states(run)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        assert target.committed(group) == source.committed(group) != {}
    summary = summarize(Manifest(conf["state_location"], "stopped"))
    assert summary["groups"] == summary["groups_exact"] == 1
