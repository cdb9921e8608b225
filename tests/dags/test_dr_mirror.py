"""The kafka_dr_mirror and kafka_dr_failover DAGs (`dag.test()`, real stack, their Spark jobs on a
Spark Connect server of this module's own ports): the start task starts the mirror, the deferred
follower starts it again after its process is killed, and the run ends once a stop is requested,
the DR cluster equal to the source; a planned failover of a mirrored mixed workload moves every
record, group and connector, which continue on the DR cluster exactly; a drill of the mirror runs
its jobs on the slots the mirror leaves on the same server; a mirror whose server restarts mirrors
again on a new session."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.renames import Renames
from kmigrate.run.cutover import course
from kmigrate.run.report.markdown import summarize
from kmigrate_demo.workload import seed_mixed
from kmigrate_spark.clients import write_clients
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import CONNECTORS
from kmigrate.run.mirror.driver import STARTS, VERIFIED
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import request_stop

from tests.support.airflow import run_dag, task_states, window_cells
from tests.support.connect import delete_connectors, file_source_config
from tests.support.kafka import create_topic, produce, records_of, seed_plain
from tests.support.migration import (
    assert_migrated_exactly,
    assert_same_partition,
    assert_workload_continues_on_target,
    partition_watermarks,
)
from tests.support.mirror import start_mirror, wait_caught_up, wait_for_round
from tests.support.spark import airflow_connect_server
from tests.support.waiting import wait_until

PORT, UI_PORT = 30202, 30240
SERVER: dict = {}  # the module's Spark Connect server: its spark_cluster module and service, to restart it


def starts(manifest: Manifest) -> list[dict]:
    return [manifest.read(p) for p in manifest.parts() if p.startswith(f"{STARTS}/")]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Spark Connect server on this module's ports, known to Airflow as spark_connect_mirror; stopped by pid."""
    with airflow_connect_server(tmp_path_factory.mktemp("spark"), "local[2]", PORT, UI_PORT,
                                "spark_connect_mirror") as (module, service):
        SERVER.update(module=module, service=service)
        yield f"sc://127.0.0.1:{PORT}"


def kill_mirrors(manifest: Manifest) -> None:
    """Every mirror process the run started, if one is left (a failed test)."""
    for start in starts(manifest):
        try:
            os.killpg(start["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def stop_mirror(manifest: Manifest, mirror: subprocess.Popen) -> None:
    """The mirror job the test started, asked to stop, killed if it did not within 90 s."""
    request_stop(manifest, "the test is done")
    try:
        mirror.communicate(timeout=90)
    finally:
        kill_mirrors(manifest)


def test_the_mirror_dag_restarts_a_killed_mirror_and_ends_when_asked_to_stop(stack, dagbag, tmp_path, server):
    topic = f"dagmirror{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=300)
    # a connector the mirror keeps for an unplanned failover (its reading through the DAG's Connect connection)
    lines, feed = f"{topic}-lines", tmp_path / "feed.txt"
    feed.write_text("".join(f"line {i}\n" for i in range(10)))
    create_topic(stack.source, f"linesof{topic}", 1)  # not mirrored: the connector is kept, its topic is not
    stack.source_connect.create(lines, file_source_config(feed, f"linesof{topic}"))
    state, run_name = tmp_path / "state", f"dr-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    errors: list[BaseException] = []

    def meanwhile() -> None:
        try:
            wait_for_round(manifest, 2, timeout_s=180)
            produce(stack.source, topic, [(b"k", b"while mirrored")] * 50, 1)
            [first] = starts(manifest)
            os.kill(first["pid"], signal.SIGKILL)  # the follower finds its heartbeat stale and starts it again
            wait_until(lambda: len(starts(manifest)) == 2, "the mirror started again", 120)
            produce(stack.source, topic, [(b"k", b"after the restart")] * 30, 0)
            wait_caught_up(manifest, stack.source, {topic: 2})
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
        finally:
            request_stop(manifest, "the test is done")  # ends the DAG run, whatever happened

    helper = threading.Thread(target=meanwhile, daemon=True)
    helper.start()
    try:
        run = run_dag(dagbag, "kafka_dr_mirror", run_name=run_name, topics_include=topic.replace(".", r"\."),
                      state_location=str(state), spark_connect_conn_id="spark_connect_mirror", stale_after_s=15,
                      interval_s=0.5, connectors=[lines])
        helper.join(60)
    finally:
        request_stop(manifest, "the test is done")
        kill_mirrors(manifest)
        delete_connectors([stack.source_connect], [lines])
    if errors:
        raise errors[0]
    assert str(run.state) == "success", task_states(run)
    kept = manifest.read(CONNECTORS)["connectors"][lines]
    assert kept["state"] == "RUNNING" and kept["offsets"][0]["offset"]["position"] == len(feed.read_bytes())
    for partition in range(2):
        assert_same_partition(stack, topic, partition)
    final = mirror_status.read(manifest)
    # the DR ends moved 680 offsets in all, over the restart (the killed driver's tasks report nothing)
    assert final["stopped"] and final["totals"]["offsets"] == 680
    assert len(starts(manifest)) == 2


def test_a_planned_failover_of_a_mirrored_workload_moves_records_groups_and_connectors_exactly(
        stack, dagbag, tmp_path, server):
    prefix = f"dagfailover{uuid.uuid4().hex[:6]}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=300)
    state, run_name = tmp_path / "state", f"dr-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    mirror = start_mirror(state, run_name, clients, server, "--topics", w.topic_pattern, "--groups", w.group_pattern,
                          "--interval-s", "0.5", "--verify-every-s", "1", "--term-s", "5")
    try:
        wait_caught_up(manifest, stack.source, w.topics)
        wait_until(lambda: len((manifest.read(VERIFIED) or {}).get("rows", [])) == sum(w.topics.values()),
                   "the mirror's live verification of every partition", 120)
        source_before = partition_watermarks(stack.source, w.topics)
        run = run_dag(dagbag, "kafka_dr_failover", run_name=run_name, state_location=str(state),
                      connectors=[w.source_connector, w.sink_connector],
                      connector_overrides={w.sink_connector: {"file": str(w.sink_file_target)}}, quiesce_seconds=2,
                      spark_connect_conn_id="spark_connect_mirror", stale_after_s=15)
        out, _ = mirror.communicate(timeout=60)  # it stopped when the failover asked
        assert str(run.state) == "success", task_states(run)
        assert mirror.returncode == 0 and "stopped at status" in out, out[-3000:]
        assert window_cells(run) == dict.fromkeys(course.FAILOVER_STEPS, "success")
        summary = summarize(manifest)
        assert summary["partitions"] == summary["partitions_equal"] == sum(w.topics.values())
        # what the mirror verified while live is not read again in the window
        assert summary["verified_live_partitions"] == summary["partitions"] and summary["verified_records_pct"] == 100
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        assert_migrated_exactly(stack.source, stack.target, w.topics, w.groups, source_before)
        assert_workload_continues_on_target(stack, w)
    finally:
        request_stop(manifest, "the test is done")
        kill_mirrors(manifest)
        delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))


def test_a_planned_failover_of_a_renamed_mirror_moves_the_workload_under_its_dr_names(stack, dagbag, tmp_path, server):
    """A mirror that renames (a DR cluster that is a consolidation target: a topic prefix, a map entry
    that wins over it, a group prefix), started by its job from the spec, failed over planned: every
    partition equal under its DR name, the groups under their DR ids, the connectors continuing on
    the DR names; the source's names are not created on the DR cluster."""
    prefix = f"dagrenamed{uuid.uuid4().hex[:6]}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=200)
    orders = w.topic("orders")
    renames = Renames(topic_prefix="b.", topics={orders: f"east.{prefix}.orders"}, group_prefix="b.")
    names, group_names = renames.topic_names(w.topics), renames.group_names(w.groups)
    state, run_name = tmp_path / "state", f"dr-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    write_spec(manifest, MirrorSpec(w.topic_pattern, groups=w.group_pattern, interval_s=0.5, verify_every_s=1.0,
                                    term_s=5.0, renames=renames))
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    mirror = start_mirror(state, run_name, clients, server)  # the job reads the spec
    try:
        wait_caught_up(manifest, stack.source, w.topics)
        source_before = partition_watermarks(stack.source, w.topics)
        run = run_dag(dagbag, "kafka_dr_failover", run_name=run_name, state_location=str(state),
                      connectors=[w.source_connector, w.sink_connector],
                      connector_overrides={w.sink_connector: {"file": str(w.sink_file_target)}}, quiesce_seconds=2,
                      spark_connect_conn_id="spark_connect_mirror", stale_after_s=15)
        out, _ = mirror.communicate(timeout=60)
        assert str(run.state) == "success", task_states(run)
        assert mirror.returncode == 0 and "stopped at status" in out, out[-3000:]
        summary = summarize(manifest)
        assert summary["partitions"] == summary["partitions_equal"] == sum(w.topics.values())
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["renamed_topics"] == names and summary["renamed_groups"] == group_names
        assert partition_watermarks(stack.source, w.topics) == source_before
        with ClusterAdmin(stack.target) as target:
            assert not set(target.list_topics()) & set(w.topics), "a source name was created on the DR cluster"
            for (topic, partition), marks in source_before.items():
                assert target.watermarks(names[topic], partition) == marks, (topic, partition)
                assert records_of(stack.target, names[topic], partition) == records_of(stack.source, topic, partition)
            for group in w.groups:
                assert not target.committed(group), f"{group} set on the DR cluster under its source name"
        assert stack.target_connect.config(w.sink_connector)["topics"] == names[orders]
        assert_workload_continues_on_target(stack, w, names, group_names)
    finally:
        request_stop(manifest, "the test is done")
        kill_mirrors(manifest)
        delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))


@pytest.mark.parametrize("parallelism, tasks", [(0, 1), (2, 2)])
def test_a_drill_on_the_mirrors_spark_connect_server_gets_the_slot_it_leaves_and_is_refused_when_it_takes_them_all(
        stack, dagbag, tmp_path, server, capfd, parallelism, tasks):
    """The mirror's tasks run for a whole term. On its Spark Connect server (2 slots) it takes half by
    default, and a drill of it whose Spark jobs go to the same server verifies the standby on the
    other; a mirror told to take both (spark_parallelism 2) gets the drill refused at its cut, at
    once and naming the way out, where its verify job would have waited for the term to end."""
    topic = f"dagslots{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=200)
    state, run_name = tmp_path / "state", f"dr-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    mirror = start_mirror(state, run_name, clients, server, "--topics", topic.replace(".", r"\."), "--interval-s", "0.5",
                          "--parallelism", str(parallelism))
    try:
        wait_caught_up(manifest, stack.source, {topic: 2})
        assert manifest.read(mirror_status.SPARK_PART) == {"server": server, "tasks": tasks, "slots": 2}
        capfd.readouterr()
        began = time.monotonic()
        run = run_dag(dagbag, "kafka_dr_drill", mirror_run=run_name, topics_include="ignored", state_location=str(state),
                      spark_connect_conn_id="spark_connect_mirror")
        took, log = time.monotonic() - began, "".join(capfd.readouterr())
        assert mirror_status.read(manifest)["stopped"] is False  # the mirror went on
    finally:
        stop_mirror(manifest, mirror)
    states = task_states(run)
    if tasks < 2:
        assert str(run.state) == "success", states
        summary = summarize(Manifest(str(state), run.run_id))
        assert summary["partitions"] == summary["partitions_equal"] == 2
    else:
        assert str(run.state) == "failed" and states["mirror_cut"] == "failed" and states["verify"] != "success", states
        assert f"holds all 2 task slots of the Spark Connect server {server}" in log, log[-3000:]
        assert took < 120, took


def test_a_mirror_whose_spark_connect_server_restarts_mirrors_again_on_a_new_session(stack, tmp_path, server):
    """The server restarted under a running mirror knows none of its sessions: the mirror's next term
    starts a new one and the records written meanwhile reach the DR cluster (the heartbeat went on
    throughout, so no restart of the mirror would have come)."""
    topic = f"dagrestart{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=100)
    state, run_name = tmp_path / "state", f"dr-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    log = tmp_path / "mirror.log"
    mirror = start_mirror(state, run_name, clients, server, "--topics", topic.replace(".", r"\."), "--interval-s", "0.5",
                          log=log)
    try:
        wait_caught_up(manifest, stack.source, {topic: 2})
        module, service = SERVER["module"], SERVER["service"]
        module.down([service])
        assert service.pid() is None
        assert module.connect_up(service, Path(sys.executable), timeout_s=300)
        produce(stack.source, topic, [(b"k", b"after the restart")] * 50, 0)
        try:
            wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=180)
        except AssertionError:
            raise AssertionError(f"not mirrored after the restart; the mirror said:\n{log.read_text()[-4000:]}") from None
        assert mirror_status.read(manifest)["stopped"] is False
    finally:
        stop_mirror(manifest, mirror)
    out = log.read_text()
    assert "the Spark session is gone (its server no longer has it (restarted?))" in out, out[-3000:]
    for partition in range(2):
        assert_same_partition(stack, topic, partition)
