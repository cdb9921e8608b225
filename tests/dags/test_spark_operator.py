"""The kmigrate Spark operator's Spark Connect path, apart from a DAG run: a task killed by
Airflow stops the job's client process (spark-submit's path is the provider's own)."""
from __future__ import annotations

import signal
import subprocess
import sys


def test_killing_a_task_on_a_spark_connect_server_stops_its_job_client():
    from kmigrate_airflow.hooks import KmigrateSparkSubmitOperator

    task = KmigrateSparkSubmitOperator(task_id="copy", application="copy_partitions.py", source_conn_id="kafka_source",
                                       target_conn_id="kafka_target", spark_remote="sc://127.0.0.1:15002")
    task._client = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        task.on_kill()
        assert task._client.wait(timeout=30) == -signal.SIGTERM
    finally:
        task._client.kill()
        task._client.wait()
