"""The cutover window in one task (kmigrate_airflow.cutover, kmigrate.run.cutover.course): a failure
injected at each of its steps, once, after the step's work and before it is marked done, so that
every step is both retried and re-run: each retry of the cutover task continues at the step that
failed, never before it, and the run ends migrated exactly, its grid and its report showing every
step and every failure. With a Spark Connect connection, the window's job runs in the task's
process on the session warmed up while the connectors stopped."""
from __future__ import annotations

import datetime
import os
import uuid

from airflow.dag_processing.dagbag import DagBag
from kmigrate.manifest import Manifest
from kmigrate.run.cutover import course
from kmigrate.run.report.markdown import summarize
from kmigrate_demo.workload import seed_mixed

from tests.support.airflow import local, task_states, window_cells
from tests.support.connect import delete_connectors
from tests.support.migration import assert_migrated_exactly, partition_watermarks


def test_a_failure_at_each_window_step_is_retried_from_that_step_and_the_run_ends_exact(
        stack, dagbag, tmp_path, monkeypatch):
    prefix = f"course{uuid.uuid4().hex[:6]}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=200)
    attempts: list[set[str]] = []  # the steps each attempt of the cutover task ran
    failed: set[str] = set()
    run_course = course.run_course

    def injecting(manifest, steps, say):
        attempts.append(set())

        def once(name, call):
            def step():
                attempts[-1].add(name)
                result = call()
                if name not in failed:  # the step's work is done, its mark is not: the retry runs it again
                    failed.add(name)
                    raise RuntimeError(f"injected failure after {name}")
                return result
            return step

        return run_course(manifest, [(item[0], once(*item)) if isinstance(item[0], str) else  # a step, or steps side by side
                                     [(name, once(name, call)) for name, call in item] for item in steps], say)

    monkeypatch.setattr(course, "run_course", injecting)
    dag = DagBag(dag_folder=dagbag.dag_folder).get_dag("kafka_migration")
    task = dag.get_task("cutover")  # a retry per step, at once
    task.retries, task.retry_delay, task.retry_exponential_backoff = 9, datetime.timedelta(0), False
    state = tmp_path / "state"
    source_before = partition_watermarks(stack.source, w.topics)
    try:
        run = local.dag_test(dag, {
            "topics_include": w.topic_pattern, "groups": w.group_pattern,
            "connectors": [w.source_connector, w.sink_connector],
            "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
            "quiesce_seconds": 1, "state_location": str(state), "run_name": prefix})
        assert str(run.state) == "success", task_states(run)
        steps = list(course.STEPS)
        stop, quiesce, snapshot, copy, restore, acls, groups, connectors, resume = steps
        # each attempt re-ran the step that failed after its work, then failed after the next (the
        # configs, ACLs, groups and connectors side by side, all four at once); none went back further
        side_by_side = {restore, acls, groups, connectors}
        assert attempts == [{stop}, {stop, quiesce}, {quiesce, snapshot}, {snapshot, copy},
                            {copy, *side_by_side}, {*side_by_side, resume}, {resume}], attempts
        assert window_cells(run) == dict.fromkeys(steps, "success")
        manifest = Manifest(str(state), prefix)
        assert [(r["step"], r["state"], r["failures"]) for r in course.outcomes(manifest)] == [
            (s, course.DONE, 1) for s in steps]
        summary = summarize(manifest)
        assert summary["partitions"] == summary["partitions_equal"] == sum(w.topics.values())
        assert summary["groups"] == summary["groups_exact"] == 2
        assert summary["connectors"] == summary["connectors_resumed"] == 2
        assert summary["verified_records_pct"] == 100.0
        assert_migrated_exactly(stack.source, stack.target, w.topics, w.groups, source_before)
        report = (state / prefix / "report.md").read_text()
        for step in steps:
            assert f"- **{step}** failed 1 time (then done on a retry): injected failure after {step}" in report
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))


def test_on_a_spark_connect_server_the_window_job_runs_in_the_task_on_a_warm_session(
        stack, dagbag, dag_spark_server, tmp_path, capfd, caplog):
    """On a Spark Connect server (the DAG tests', tests/conftest.py): the cutover task starts the
    job's session while the connectors stop and runs the job in its own process, so the window holds
    no process or session start; the run ends migrated exactly."""
    remote = dag_spark_server
    prefix = f"warm{uuid.uuid4().hex[:6]}"
    w = seed_mixed(stack.source, stack.source_connect, prefix, tmp_path / "workload", records=200)
    state = tmp_path / "state"
    source_before = partition_watermarks(stack.source, w.topics)
    try:
        capfd.readouterr()
        run = local.dag_test(DagBag(dag_folder=dagbag.dag_folder).get_dag("kafka_migration"), {
            "topics_include": w.topic_pattern, "groups": w.group_pattern,
            "connectors": [w.source_connector, w.sink_connector],
            "connector_overrides": {w.sink_connector: {"file": str(w.sink_file_target)}},
            "quiesce_seconds": 1, "state_location": str(state), "run_name": prefix,
            "spark_connect_conn_id": "spark_connect_default"})
        log = "".join(capfd.readouterr()) + caplog.text  # the job's lines, and the task's log lines
        assert str(run.state) == "success", task_states(run)
    finally:
        delete_connectors((stack.source_connect, stack.target_connect), (w.source_connector, w.sink_connector))
    assert f"running window_copy in this task as a client of the Spark Connect server {remote}" in log
    assert "warming up the window's Spark job failed" not in log and "the job starts cold" not in log
    # no Spark Connect mode left in this process's environment for later spark-submit jobs to inherit
    assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
    summary = summarize(Manifest(str(state), prefix))
    window = {row["step"]: row["seconds"] for row in summary["window"]}
    # a cold start (a session, its Python workers) takes about 2 s here, more under load; a warm one 0.1-0.8 s
    # on this busy 2-core machine, 1.3 s once while a full suite ran beside it (what says warm is the log above)
    assert window["job_start"] < 1.5 and window["between steps"] < 0.5, window
    assert summary["partitions"] == summary["partitions_equal"] and summary["connectors_resumed"] == 2
    assert_migrated_exactly(stack.source, stack.target, w.topics, w.groups, source_before)
