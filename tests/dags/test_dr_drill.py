"""The kafka_dr_drill DAG (`dag.test()`, real stack): drills measure RPO and RTO and a second drill
copies only the new records; with a Spark Connect connection its Spark jobs run on that server, and a
spark_connect_conn_id that is no connection id (a URL) is refused by the trigger form; a drill of a
running mirror verifies the standby at a cut and fails its connectors over dry."""
from __future__ import annotations

import re
import threading
import uuid

import pytest
from confluent_kafka import Producer
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.connectors import CONNECTORS, ConnectorWatch
from kmigrate.run.mirror.drill import CUT
from kmigrate.run.mirror.driver import Mirror
from kmigrate.run.mirror.spec import MirrorSpec, write_spec
from kmigrate.run.mirror.term import request_stop
from kmigrate.run.report.markdown import summarize

from tests.support.airflow import run_dag, task_states
from tests.support.connect import delete_connectors, file_source_config
from tests.support.kafka import commit_offsets, create_topic, produce, seed_plain
from tests.support.monitoring import run_panels_answered
from tests.support.waiting import wait_until


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

    def recovery(read) -> None:  # noqa: ANN001 - the drill's RPO and RTO as a real Prometheus holds them
        drill, r = Manifest(str(state), second.run_id).read("drill"), f'run="{second.run_id}"'
        assert read(f"kmigrate_run_rpo_records{{{r}}}") == drill["rpo_records"]
        assert read(f"kmigrate_run_rpo_seconds{{{r}}}") == drill["rpo_seconds"]
        assert read(f"kmigrate_run_rto_seconds{{{r}}}") == drill["rto_seconds"]
    queries, answered = run_panels_answered(tmp_path / "prometheus", str(state), second.run_id, port=17192,
                                            exporter_port=17570, check=recovery)
    recovered = [q for q in queries if "_rpo_" in q or "_rto_" in q]  # the panel a migration leaves empty
    assert recovered and set(recovered) <= set(answered), sorted(set(recovered) - set(answered))


def test_a_dr_drill_runs_its_spark_jobs_on_a_spark_connect_server(stack, dagbag, dag_spark_server, tmp_path, capfd):
    """spark_connect_conn_id: the copy and verify jobs run as Python clients of the Spark Connect
    server of that Airflow connection (the DAG tests' server, tests/conftest.py), with no spark-submit."""
    remote = dag_spark_server
    topic = f"dagremote{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=500)
    state = tmp_path / "state"
    capfd.readouterr()
    run = run_dag(dagbag, "kafka_dr_drill", topics_include=topic.replace(".", r"\."), state_location=str(state),
                  spark_connect_conn_id="spark_connect_default")
    log = "".join(capfd.readouterr())
    assert str(run.state) == "success", task_states(run)
    assert log.count(f"Spark session on {remote}") == 2, log[-3000:]  # the copy job and the verify job
    assert "Spark-Submit cmd" not in log  # what SparkSubmitHook logs when it launches spark-submit
    summary = summarize(Manifest(str(state), run.run_id))
    assert summary["partitions_equal"] == 2 and summary["records"] == 1000
    durations = {ti.task_id: round(ti.duration or 0, 1) for ti in run.get_task_instances() if ti.task_id in ("copy", "verify")}
    print(f"on the Spark Connect server: {durations} s")


def test_a_spark_connect_conn_id_that_is_no_connection_id_is_refused(dagbag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError):  # a URL: the server goes in a connection (its token kept there)
        run_dag(dagbag, "kafka_dr_drill", topics_include="x", spark_connect_conn_id="sc://spark:15002")


def test_a_drill_of_a_running_mirror_verifies_the_standby_at_a_cut_and_fails_its_connectors_over_dry(
        stack, dagbag, tmp_path, request):
    """kafka_dr_drill with mirror_run: the mirror (followed in this process) keeps a live source's topic,
    a group and a file source connector; the drill waits for the DR cluster to reach its cut,
    verifies every partition there record by record, places the connector on the DR Connect cluster
    stopped with its offsets and removes it, and reports RPO and RTO. The source, the mirror's
    topics and its groups are left as they were: the mirror goes on."""
    prefix = f"mdrill{uuid.uuid4().hex[:6]}"
    topic, lines, group = f"{prefix}.events", f"{prefix}-lines", f"{prefix}.readers"
    create_topic(stack.source, topic, 2)
    feed = tmp_path / "feed.txt"
    feed.write_text("".join(f"line {i}\n" for i in range(20)))
    stack.source_connect.create(lines, file_source_config(feed, topic))
    request.addfinalizer(lambda: delete_connectors([stack.source_connect, stack.target_connect], [lines]))
    state = tmp_path / "state"
    mirror_run = Manifest(str(state), f"{prefix}-mirror")
    spec = write_spec(mirror_run, MirrorSpec(re.escape(prefix) + r"\..*", groups=re.escape(group), interval_s=0.2,
                                             term_s=5, connectors=(lines,)))
    mirror = Mirror(mirror_run, stack.source, stack.target, spec, say=lambda _: None,
                    connectors=ConnectorWatch(mirror_run, stack.source, stack.target, stack.source_connect, [lines],
                                              every_s=1))
    stopping = threading.Event()

    def write() -> None:  # the source stays live through the drill
        producer = Producer(stack.source.producer(**{"linger.ms": 5}))
        while not stopping.wait(0.01):
            producer.produce(topic, b"live", key=b"k", partition=1)
            producer.poll(0)
        producer.flush(30)

    threads = [threading.Thread(target=mirror.run, daemon=True), threading.Thread(target=write, daemon=True)]
    for thread in threads:
        thread.start()
    try:
        commit_offsets(stack.source, group, {(topic, 0): 100_000})  # past the end: the mirror copies it capped
        wait_until(lambda: (kept := mirror_run.read(CONNECTORS)) and kept["connectors"][lines]["offsets"]
                   and any(g.get("group") == group for g in mirror_status.read(mirror_run)["groups"]),
                   "the mirror keeping the connector and the group", 90)
        run = run_dag(dagbag, "kafka_dr_drill", mirror_run=mirror_run.run_id, topics_include="ignored",
                      state_location=str(state))
        assert str(run.state) == "success", task_states(run)
        assert mirror_status.read(mirror_run)["stopped"] is False  # the mirror went on
    finally:
        stopping.set()
        request_stop(mirror_run, "the test is done")
        for thread in threads:
            thread.join(120)
    manifest = Manifest(str(state), run.run_id)
    summary = summarize(manifest)
    assert summary["partitions"] == summary["partitions_equal"] == 2  # verified record by record up to the cut
    cut = manifest.read(CUT)
    assert cut["partitions"] == 2 and cut["groups"] == 1 and cut["rpo_records"] >= 0
    drill = manifest.read("drill")
    [placed] = drill["connectors"]
    assert placed["name"] == lines and placed["offsets"][0]["offset"]["position"] > 0
    assert 0 < drill["rto_seconds"] < 600 and drill["mirror_run"] == mirror_run.run_id
    assert lines not in stack.target_connect.connectors()  # the dry failover removed it
    assert "RTO" in (state / run.run_id / "report.md").read_text()
