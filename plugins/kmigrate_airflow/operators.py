"""The Spark submit operator of the kmigrate jobs, and the factory the DAGs build their Spark tasks
with."""
from __future__ import annotations

import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowFailException
from airflow.sdk.log import mask_secret
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError, KmigrateError
from kmigrate.manifest import Manifest, Part
from kmigrate_spark.clients import CLIENTS_ENV, clients_json, write_clients
from kmigrate.run.cutover.events import STOPPED, cutover_time
from kmigrate.secrets import url_secrets
from kmigrate_spark.conf import FINAL_EXIT, LAUNCH_CONF, REMOTE_ENV, shown_remote

from kmigrate_airflow.hooks import kafka_cluster

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"
COPY_POOL = "kafka_migration_copy"
# the client config file's name, in the driver's working directory on YARN in cluster mode
CLIENTS_FILE = "kmigrate-clients.json"
# on Kubernetes in cluster mode: "SECRET:KEY", the Kubernetes secret holding the client configs
# (the JSON of KMIGRATE_CLIENTS_JSON) that the driver pod gets as that environment variable
K8S_CLIENTS_SECRET_ENV = "KMIGRATE_K8S_CLIENTS_SECRET"


def clients_handoff(master: str, deploy_mode: str | None, clients_file: str,
                    k8s_secret: str | None = None) -> tuple[list[str], list[str], dict[str, str]]:
    """How a spark-submit job on YARN or Kubernetes gets its client configs, as (job arguments,
    files to ship, Spark confs), none of which holds a secret: there SparkSubmitHook would turn the
    environment variable KMIGRATE_CLIENTS_JSON into `--conf spark.yarn.appMasterEnv...=` /
    `spark.kubernetes.driverEnv...=`, a command line. `clients_file` is an owner-only file on this
    worker, deleted once spark-submit returns.
    - client mode (the driver runs here): `--clients FILE`;
    - YARN, cluster mode: the file goes with `--files` (YARN keeps it owner-only in the application's
      staging directory and the containers' working directories, deleted with the application), and
      the driver reads it in its working directory (`--clients kmigrate-clients.json`);
    - Kubernetes, cluster mode: from a Kubernetes secret ($KMIGRATE_K8S_CLIENTS_SECRET=SECRET:KEY) as
      the driver pod's environment variable; without one, refused (a file would go through
      spark.kubernetes.file.upload.path, readable by whoever reads that store)."""
    if deploy_mode != "cluster":
        return ["--clients", clients_file], [], {}
    if "yarn" in master:
        return ["--clients", Path(clients_file).name], [clients_file], {}
    if not k8s_secret or ":" not in k8s_secret:
        raise ConfigError(f"a Spark job on Kubernetes in cluster mode ({master}) gets its Kafka client configs "
                          "from a Kubernetes secret: create one holding the JSON "
                          '{"source": {...}, "target": {...}} and set '
                          f"{K8S_CLIENTS_SECRET_ENV}=SECRET:KEY on the Airflow workers (or use client mode)")
    return [], [], {f"spark.kubernetes.driver.secretKeyRef.{CLIENTS_ENV}": k8s_secret}


class KmigrateSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator for the kmigrate jobs: resolves the two Kafka connections when it runs
    and passes their client configs to the job in the environment (KMIGRATE_CLIENTS_JSON), or on
    YARN and Kubernetes in an owner-only file or a Kubernetes secret (`clients_handoff`), so
    secrets are in no command line, DAG file, XCom or log. The driver's Python is this worker's.

    With `spark_remote` (sc://HOST:PORT) the job runs as a plain Python client of that Spark
    Connect server instead of under spark-submit: no JVM of its own to start (10-16 s a job on a
    small machine), the server's executors run the tasks. Its output goes to the task log. The
    server's URL reaches the job in its environment ($KMIGRATE_SPARK_REMOTE), not its command line,
    and log lines show it without its token."""

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
        for secret in url_secrets(self.spark_remote or ""):
            mask_secret(secret)  # the Spark Connect URL's token: no task log line shows it
        # the job's own --remote default ($KMIGRATE_SPARK_REMOTE) must not send a spark-submit job there too
        self.env_vars = {**(self.env_vars or {}), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
                         REMOTE_ENV: ""}
        if self.spark_remote:
            self.env_vars[CLIENTS_ENV] = clients_json(source, target)
            self._run_on_connect(python)
            return
        folder = self._hand_clients(source, target)
        try:
            super().execute(context)
        except AirflowException as exc:  # the hook names the exit code of spark-submit (the driver's in client mode)
            if f"Error code is: {FINAL_EXIT}." in str(exc):
                raise AirflowFailException(f"{Path(self.application).name} refused to go on (exit code {FINAL_EXIT}): "
                                           "a retry cannot help; see its output above") from exc
            raise
        finally:
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)

    def _hand_clients(self, source: ClusterConfig, target: ClusterConfig) -> str | None:
        """Give the spark-submit job its client configs: in its environment, or where SparkSubmitHook
        would put that on the command line (a YARN or Kubernetes master) as `clients_handoff` says.
        Returns the owner-only folder of the client config file, for the caller to delete."""
        connection = self._get_hook()._connection  # the master and deploy mode, as the hook reads them
        if "yarn" not in connection["master"] and "k8s" not in connection["master"]:
            self.env_vars = {**(self.env_vars or {}), CLIENTS_ENV: clients_json(source, target)}
            return None
        folder = tempfile.mkdtemp(prefix="kmigrate-clients-")  # mode 700
        try:
            clients_file = write_clients(Path(folder) / CLIENTS_FILE, source, target)  # mode 600
            args, files, conf = clients_handoff(connection["master"], connection["deploy_mode"], str(clients_file),
                                                os.environ.get(K8S_CLIENTS_SECRET_ENV))
        except ConfigError as exc:
            shutil.rmtree(folder, ignore_errors=True)
            raise AirflowFailException(str(exc)) from exc
        self.application_args = [*(self.application_args or []), *args]
        self.files = ",".join(f for f in [self.files, *files] if f) or None
        self.conf = {**(self.conf or {}), **conf}
        self._hook = None  # built again, with these
        return folder

    def _run_on_connect(self, python: str) -> None:
        job = Path(self.application).name
        shown = shown_remote(self.spark_remote)
        self.log.info("running %s as a client of the Spark Connect server %s", job, shown)
        self._client = subprocess.Popen(
            [python, self.application, *self.application_args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **self.env_vars, REMOTE_ENV: self.spark_remote})
        assert self._client.stdout is not None
        for line in self._client.stdout:
            self.log.info("%s", line.rstrip())
        code = self._client.wait()
        if code == FINAL_EXIT:
            raise AirflowFailException(f"{job} refused to go on (exit code {code}): a retry cannot help; see its output "
                                       "above")
        if code != 0:
            raise AirflowException(f"{job} on the Spark Connect server {shown} exited with code {code}; "
                                   "its output is in the lines above")

    def on_kill(self) -> None:
        if self._client is None:
            super().on_kill()
        elif self._client.poll() is None:
            self._client.terminate()  # the job closes its session; the server stops the session's tasks


class KmigrateCutoverSensor(BaseSensorOperator):
    """Waits for the run's `cutover_at` time (none: passes at once), holding no worker between
    pokes (reschedule mode). Each poke before that time runs a catch-up pre-copy round (the copy
    job with --catch-up, as the pre-copy task runs it), so that the target stays within one round
    of the live source (with `catch_up` "True": the pre-copy is on); a poke less than one interval
    before the time sleeps until it, so that the connectors stop on time. A run that has stopped
    its connectors already (a retry, a re-run) passes at once."""

    template_fields: Sequence[str] = ("cutover_at", "catch_up", "state_location", "run_name", "job_args",
                                      "source_conn_id", "target_conn_id", "spark_remote")

    def __init__(self, *, cutover_at: str, catch_up: str, state_location: str, run_name: str, application: str,
                 job_args: Sequence[str], source_conn_id: str, target_conn_id: str, spark_remote: str = "",
                 **kwargs: Any) -> None:
        kwargs.setdefault("mode", "reschedule")
        super().__init__(**kwargs)
        self.application = application  # the copy job, run with --catch-up
        self.cutover_at = cutover_at
        self.catch_up = catch_up
        self.state_location = state_location
        self.run_name = run_name
        self.job_args = list(job_args)
        self.source_conn_id = source_conn_id
        self.target_conn_id = target_conn_id
        self.spark_remote = spark_remote

    def poke(self, context: Any) -> bool:
        try:
            at = cutover_time(self.cutover_at)
        except KmigrateError as exc:
            raise AirflowFailException(str(exc)) from exc
        if at is None or Manifest(self.state_location, self.run_name).exists(Part.event(STOPPED)):
            return True
        now = datetime.datetime.now(datetime.timezone.utc)
        if now >= at:
            self.log.info("cutover time %s reached", at.isoformat())
            return True
        if self.catch_up != "True":
            self.log.info("cutover at %s (in %.0fs); the pre-copy is off: waiting", at.isoformat(),
                          (at - now).total_seconds())
        else:
            self.log.info("cutover at %s (in %.0fs): a catch-up pre-copy round meanwhile", at.isoformat(),
                          (at - now).total_seconds())
            self._catch_up(context)
        left = (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
        if left <= self.poke_interval:
            self.log.info("%.1fs to the cutover time: waiting for it here", max(0.0, left))
            time.sleep(max(0.0, left))
            return True
        return False

    def _catch_up(self, context: Any) -> None:
        KmigrateSparkSubmitOperator(
            task_id=f"{self.task_id}_round", application=self.application, conn_id="spark_default",
            source_conn_id=self.source_conn_id, target_conn_id=self.target_conn_id, spark_remote=self.spark_remote,
            application_args=[*self.job_args, "--catch-up"], conf={**LAUNCH_CONF, "spark.ui.showConsoleProgress": "false"},
        ).execute(context)


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


# seconds between catch-up rounds while a run waits for its cutover_at time
CATCH_UP_ENV = "KMIGRATE_CUTOVER_CATCH_UP_S"


def cutover_sensor(task_id: str, script: str, run_id: str, *extra: str) -> KmigrateCutoverSensor:
    """The wait for the `cutover_at` param, its catch-up rounds (`script` with --catch-up) run like
    spark_job's tasks, every $KMIGRATE_CUTOVER_CATCH_UP_S seconds (30 by default)."""
    poke_interval = float(os.environ.get(CATCH_UP_ENV) or 30)
    return KmigrateCutoverSensor(
        task_id=task_id, application=str(SPARK_JOBS / script), cutover_at="{{ params.cutover_at or '' }}", catch_up="{{ params.pre_copy }}",
        state_location="{{ params.state_location }}", run_name=run_id,
        job_args=["--state-location", "{{ params.state_location }}", "--run-id", run_id,
                  "--parallelism", "{{ params.spark_parallelism }}", *extra],
        source_conn_id="{{ params.source_kafka_conn_id }}", target_conn_id="{{ params.target_kafka_conn_id }}",
        spark_remote="{{ params.spark_remote or '' }}", poke_interval=poke_interval,
        timeout=datetime.timedelta(days=31).total_seconds(), pool=COPY_POOL, trigger_rule="none_failed",
        retries=3,
    )
