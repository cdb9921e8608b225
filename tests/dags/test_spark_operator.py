"""The kmigrate Spark operator's Spark Connect path (its spark_connect_conn_id an Airflow connection
of type spark_connect), apart from a DAG run: a task killed by Airflow stops the job's client
process, and a job that exits non-zero fails the task (so that Airflow retries it) with the job's
output in the task log. spark-submit's path is the provider's own."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest


def test_killing_a_task_on_a_spark_connect_server_stops_its_job_client():
    from kmigrate_airflow.operators import KmigrateSparkSubmitOperator

    task = KmigrateSparkSubmitOperator(task_id="copy", application="copy_partitions.py", source_conn_id="kafka_source",
                                       target_conn_id="kafka_target", spark_connect_conn_id="spark_connect_default")
    # a job client that runs until it is stopped (its sleep is the scenario, not a wait)
    task._client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        task.on_kill()
        assert task._client.wait(timeout=30) == -signal.SIGTERM
    finally:
        task._client.kill()
        task._client.wait()


def test_a_job_failing_on_a_spark_connect_server_fails_the_task_with_its_output_in_the_log(tmp_path, capfd,
                                                                                           monkeypatch):
    from airflow.exceptions import AirflowException
    from airflow.sdk.exceptions import AirflowFailException
    from kmigrate_airflow.launch import launch
    from kmigrate_airflow.operators import KmigrateSparkSubmitOperator

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_UNDER_TEST",
                       json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002}))
    job = tmp_path / "copy_partitions.py"  # stands in for the job's client: its arguments, a line, an exit code
    task = KmigrateSparkSubmitOperator(task_id="copy", application=str(job), application_args=["--run-id", "r1"],
                                       source_conn_id="kafka_source", target_conn_id="kafka_target",
                                       spark_connect_conn_id="spark_connect_under_test")
    task.env_vars = {}
    job.write_text("import os, sys\nprint('copy_partitions: args', ' '.join(sys.argv[1:]), os.environ['KMIGRATE_SPARK_REMOTE'], "
                   "flush=True)\nsys.exit(1)\n")
    with pytest.raises(AirflowException,
                       match="copy_partitions.py on the Spark Connect server sc://127.0.0.1:15002 exited with code 1") as raised:
        launch(task, task.log)
    assert not isinstance(raised.value, AirflowFailException)  # retried
    out, err = capfd.readouterr()  # the task's log (Airflow's structured logging writes to the console here)
    # the server's URL in the job's environment, not its command line (a token in it: tests/dags/test_spark_secrets.py)
    assert "copy_partitions: args --run-id r1 sc://127.0.0.1:15002" in out + err
    # exit code 3: the job refused to go on (the source moved after the snapshot); no retry can help
    job.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(AirflowFailException, match="copy_partitions.py refused to go on \\(exit code 3\\)"):
        launch(task, task.log)
