"""The Spark submit operator of the kmigrate jobs, and the factory the DAGs build their Spark tasks
with."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from kmigrate.run.clients import CLIENTS_ENV, clients_json
from kmigrate_spark.conf import LAUNCH_CONF, REMOTE_ENV

from kmigrate_airflow.hooks import kafka_cluster

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"
COPY_POOL = "kafka_migration_copy"


class KmigrateSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for the kmigrate jobs: resolves the two Kafka connections when it runs
    and passes their client configs to the job in the environment (KMIGRATE_CLIENTS_JSON), so
    secrets are in no command line, DAG file, XCom or log. The driver's Python is this worker's.

    With `spark_remote` (sc://HOST:PORT) the job runs as a plain Python client of that Spark
    Connect server instead of under spark-submit: no JVM of its own to start (10-16 s a job on a
    small machine), the server's executors run the tasks. Its output goes to the task log."""

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, "source_conn_id", "target_conn_id",
                                      "spark_remote")

    def __init__(self, *, source_conn_id: str, target_conn_id: str, spark_remote: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id = source_conn_id
        self.target_conn_id = target_conn_id
        self.spark_remote = spark_remote
        self._client: subprocess.Popen | None = None

    def execute(self, context: Any) -> None:
        source = kafka_cluster(self.source_conn_id, "source")
        target = kafka_cluster(self.target_conn_id, "target")
        python = os.environ.get("PYSPARK_PYTHON", sys.executable)
        # the job's own --remote default ($KMIGRATE_SPARK_REMOTE) must not send a spark-submit job there too
        self.env_vars = {**(self.env_vars or {}), CLIENTS_ENV: clients_json(source, target),
                         "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, REMOTE_ENV: ""}
        if self.spark_remote:
            self._run_on_connect(python)
        else:
            super().execute(context)

    def _run_on_connect(self, python: str) -> None:
        job = Path(self.application).name
        self.log.info("running %s as a client of the Spark Connect server %s", job, self.spark_remote)
        self._client = subprocess.Popen(
            [python, self.application, *self.application_args, "--remote", self.spark_remote],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **self.env_vars})
        assert self._client.stdout is not None
        for line in self._client.stdout:
            self.log.info("%s", line.rstrip())
        code = self._client.wait()
        if code != 0:
            raise AirflowException(f"{job} on the Spark Connect server {self.spark_remote} exited with code {code}; "
                                   "its output is in the lines above")

    def on_kill(self) -> None:
        if self._client is None:
            super().on_kill()
        elif self._client.poll() is None:
            self._client.terminate()  # the job closes its session; the server stops the session's tasks


def spark_job(task_id: str, script: str, run_id: str, *extra: str, retries: int = 3) -> KmigrateSparkSubmitOperator:
    """A kmigrate Spark job as a task: the run's state location, run id and parallelism from the
    DAG's params, the Kafka clusters from its connection params, the copy pool."""
    return KmigrateSparkSubmitOperator(
        task_id=task_id,
        application=str(SPARK_JOBS / script),
        conn_id="spark_default",
        source_conn_id="{{ params.source_kafka_conn_id }}",
        target_conn_id="{{ params.target_kafka_conn_id }}",
        application_args=["--state-location", "{{ params.state_location }}", "--run-id", run_id,
                          "--parallelism", "{{ params.spark_parallelism }}", *extra],
        spark_remote="{{ params.spark_remote or '' }}",
        conf={**LAUNCH_CONF, "spark.ui.showConsoleProgress": "false"},
        pool=COPY_POOL,
        retries=retries,
        execution_timeout=datetime.timedelta(hours=12),
    )
