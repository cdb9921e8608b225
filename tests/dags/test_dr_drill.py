"""The kafka_dr_drill DAG (`dag.test()`, real stack): drills measure RPO and RTO and a second drill
copies only the new records; with a Spark Connect connection its Spark jobs run on that server, and a
spark_connect_conn_id that is no connection id (a URL) is refused by the trigger form."""
from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.report.markdown import summarize

from tests.support.airflow import run_dag, task_states
from tests.support.kafka import produce, seed_plain
from tests.support.stack import load_spark_cluster_module


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


def test_a_dr_drill_runs_its_spark_jobs_on_a_spark_connect_server(stack, dagbag, tmp_path, capfd, monkeypatch):
    """spark_connect_conn_id: the copy and verify jobs run as Python clients of the Spark Connect
    server of that Airflow connection (started here on this test's own ports, stopped by pid), with
    no spark-submit."""
    module = load_spark_cluster_module()
    remote = "sc://127.0.0.1:30102"  # the URL the connection below gives
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DRILL",
                       json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 30102}))
    server = module.connect_service(tmp_path / "spark", "local[2]", 30102, 30140, Path(sys.executable))
    server.conf["spark.ui.enabled"] = "false"  # the test reads no UI
    assert module.connect_up(server, Path(sys.executable), timeout_s=120)
    try:
        topic = f"dagremote{uuid.uuid4().hex[:6]}.events"
        seed_plain(stack.source, topic, partitions=2, per_partition=500)
        state = tmp_path / "state"
        capfd.readouterr()
        run = run_dag(dagbag, "kafka_dr_drill", topics_include=topic.replace(".", r"\."), state_location=str(state),
                      spark_connect_conn_id="spark_connect_drill")
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


def test_a_spark_connect_conn_id_that_is_no_connection_id_is_refused(dagbag):
    from airflow.sdk.definitions.param import ParamValidationError

    with pytest.raises(ParamValidationError):  # a URL: the server goes in a connection (its token kept there)
        run_dag(dagbag, "kafka_dr_drill", topics_include="x", spark_connect_conn_id="sc://spark:15002")
