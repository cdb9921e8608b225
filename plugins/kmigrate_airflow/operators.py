"""The Spark task operator of the kmigrate jobs, the cutover sensor, and the factories the DAGs
build them with. Both launch their jobs through kmigrate_airflow.launch."""
from __future__ import annotations

import datetime
import functools
import os
import subprocess
import time
from collections.abc import Callable
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseSensorOperator
from kmigrate.manifest import Manifest, Part
from kmigrate.run.checks.request import RunRequest
from kmigrate.run.records import timeline
from kmigrate.run.records.events import STOPPED
from kmigrate_spark.job_args import request_command

from kmigrate_airflow.frame import run_request
from kmigrate_airflow.launch import JOB_CONF, SPARK_JOBS, SparkJob, launch, stop_client

COPY_POOL = "kafka_migration_copy"


class KmigrateSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for the kmigrate jobs, launched by kmigrate_airflow.launch: it resolves the
    two Kafka connections when it runs and passes their client configs to the job in the environment (KMIGRATE_CLIENTS_JSON), or on
    YARN and Kubernetes in an owner-only file or a Kubernetes secret (`clients_handoff`), so
    secrets are in no command line, DAG file, XCom or log. The driver's Python is this worker's.

    When the task runs, the job's arguments (`command` of the run's request: by default
    kmigrate_spark.job_args.request_command, the run's state location, name and parallelism) and
    its connections (the two Kafka clusters', the Spark Connect server's) are taken from the run's
    typed request (`take`), which reads the task's params as every other task does.

    With `spark_connect_conn_id` naming an existing Airflow connection of type Spark Connect, the
    job runs as a plain Python client of that connection's server instead of under spark-submit: no
    JVM of its own to start (10-16 s a job on a small machine), the server's executors run the tasks.
    Its output goes to the task log. The server's URL, built from the connection when the task runs,
    reaches the job in its environment ($KMIGRATE_SPARK_REMOTE), not its command line, and log lines
    show it without its token."""

    def __init__(self, *, command: Callable[[RunRequest], list[str]] = request_command, source_conn_id: str = "",
                 target_conn_id: str = "", spark_connect_conn_id: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.command = command
        self.source_conn_id = source_conn_id
        self.target_conn_id = target_conn_id
        self.spark_connect_conn_id = spark_connect_conn_id
        self._client: subprocess.Popen | None = None

    def execute(self, context: Any) -> None:
        self.take(run_request(context["params"], context.get("run_id")))
        launch(self, self.log, submit=functools.partial(self._submit, context), started=self._started)

    def take(self, request: RunRequest) -> None:
        """The job's arguments and connections from the run's `request`."""
        self.application_args = self.command(request)
        self.source_conn_id = request.source_kafka_conn_id
        self.target_conn_id = request.target_kafka_conn_id
        self.spark_connect_conn_id = request.spark.connect_conn_id

    def _submit(self, context: Any) -> None:
        """spark-submit through the provider's own execute, with the client configs handed over."""
        self._hook = None  # built again, with them
        super().execute(context)

    def _started(self, client: subprocess.Popen) -> None:
        self._client = client

    def on_kill(self) -> None:
        if not stop_client(self._client):
            super().on_kill()


class KmigrateCutoverSensor(BaseSensorOperator):
    """Waits for the run's `cutover_at` time (none: passes at once), holding no worker between
    pokes (reschedule mode). Each poke before that time has the launcher run a catch-up round
    (the `application` job, catch_up.py, run like the Spark tasks' jobs), so that the target stays
    within one round of the live source (when the run's pre-copy is on), unless the
    time is nearer than a round has taken; a poke less than one interval before the time sleeps
    until it, so that the connectors stop on time. A run that has stopped
    its connectors already (a retry, a re-run) passes at once. Each poke reads the run's typed
    request from the task's params: its cutover time, its pre-copy switch, its manifest, and the
    round's arguments (`command` of the request) and connections."""

    def __init__(self, *, application: str, command: Callable[[RunRequest], list[str]] = request_command,
                 **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.application = application  # the catch-up round's job
        self.command = command
        self._client: subprocess.Popen | None = None

    def poke(self, context: Any) -> bool:
        request = run_request(context["params"], context.get("run_id"))
        at = request.cutover_at
        manifest = Manifest(request.state_location, request.name)
        if at is None or manifest.exists(Part.event(STOPPED)):
            return True
        now = datetime.datetime.now(datetime.timezone.utc)
        if now >= at:
            self.log.info("cutover time %s reached", at.isoformat())
            return True
        ahead = (at - now).total_seconds()
        if not request.pre_copy:
            self.log.info("cutover at %s (in %.0fs); the pre-copy is off: waiting", at.isoformat(), ahead)
        elif ahead <= (took := longest_round_seconds(manifest)):  # a round now would end after the time
            self.log.info("cutover at %s (in %.0fs), sooner than a catch-up round took (%.0fs): no round, "
                          "waiting", at.isoformat(), ahead, took)
        else:
            self.log.info("cutover at %s (in %.0fs): a catch-up pre-copy round meanwhile", at.isoformat(), ahead)
            with timeline.timed(manifest, CATCH_UP_STEP):
                self._catch_up(request)
        left = (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        if left <= self.poke_interval:
            self.log.info("%.1fs to the cutover time: waiting for it here", max(0.0, left))
            time.sleep(max(0.0, left))
            return True
        return False

    def catch_up_job(self, request: RunRequest) -> SparkJob:
        """The catch-up round's job for the run's `request`: its arguments and connections."""
        return SparkJob.of(request, self.application, self.command(request))

    def _catch_up(self, request: RunRequest) -> None:
        """One catch-up round, launched as the Spark tasks' jobs are (on spark_default, or the Spark
        Connect connection's server), to its end."""
        launch(self.catch_up_job(request), self.log, started=self._started)

    def _started(self, client: subprocess.Popen) -> None:
        self._client = client

    def on_kill(self) -> None:
        stop_client(self._client)  # a round's client on a Spark Connect server


def spark_job(task_id: str, script: str, command: Callable[[RunRequest], list[str]] = request_command, *,
              retries: int = 3) -> KmigrateSparkSubmitOperator:
    """A kmigrate Spark job as a task: its arguments `command` of the run's request (by default the
    run's state location, name and parallelism), the Kafka clusters from its connection params, the
    copy pool."""
    return KmigrateSparkSubmitOperator(
        task_id=task_id,
        application=str(SPARK_JOBS / script),
        conn_id="spark_default",
        command=command,
        conf=dict(JOB_CONF),
        pool=COPY_POOL,
        retries=retries,
        execution_timeout=datetime.timedelta(hours=12),
    )


# seconds between catch-up rounds while a run waits for its cutover_at time
CATCH_UP_ENV = "KMIGRATE_CUTOVER_CATCH_UP_S"
CATCH_UP_STEP = "catch_up"  # the timeline's step: a catch-up round's launch to its end


def longest_round_seconds(manifest: Manifest) -> float:
    """The longest the run's catch-up rounds took, their job's start-up included (0 before the first)."""
    return max((float(r["seconds"]) for r in timeline.steps(manifest) if r["step"] == CATCH_UP_STEP), default=0.0)


def cutover_sensor(task_id: str, script: str,
                   command: Callable[[RunRequest], list[str]] = request_command) -> KmigrateCutoverSensor:
    """The wait for the `cutover_at` param, its catch-up rounds (`script`, catch_up.py, with the
    arguments `command` of the run's request) run like spark_job's tasks, every
    $KMIGRATE_CUTOVER_CATCH_UP_S seconds (30 by default)."""
    poke_interval = float(os.environ.get(CATCH_UP_ENV) or 30)
    return KmigrateCutoverSensor(
        task_id=task_id, application=str(SPARK_JOBS / script), command=command, poke_interval=poke_interval,
        timeout=datetime.timedelta(days=31).total_seconds(), pool=COPY_POOL, trigger_rule="none_failed",
        retries=3,
    )
