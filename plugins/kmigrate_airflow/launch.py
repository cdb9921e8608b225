"""Launching a kmigrate Spark job from an Airflow worker, for the Spark task operator and the
cutover sensor's catch-up rounds alike: under spark-submit through the Spark provider's hook, or,
with a Spark Connect connection, as a plain Python client of that connection's server.

The two Kafka connections are resolved when the job runs, and their client configs reach the job
where no command line, DAG file, XCom or log shows them: in its environment
(KMIGRATE_CLIENTS_JSON), or on YARN and Kubernetes (where the hook would turn that variable into a
command line) in an owner-only file or a Kubernetes secret (`clients_handoff`). The driver's Python
is this worker's. A Spark Connect server's URL is built from its Airflow connection
(`hooks.spark_connect_url`) when the job runs too, reaches the job in its environment
($KMIGRATE_SPARK_REMOTE), and log lines show it without its token. A job that exits with
FINAL_EXIT refused to go on: the task fails without a retry."""
from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from airflow.exceptions import AirflowException
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.sdk.exceptions import AirflowFailException
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate.run.checks.request import RunRequest
from kmigrate_spark.clients import CLIENTS_ENV, clients_json, write_clients
from kmigrate_spark.conf import FINAL_EXIT, LAUNCH_CONF, REMOTE_ENV, shown_remote

from kmigrate_airflow.hooks import KafkaConnectHook, kafka_cluster, spark_connect_url

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark_jobs"
# the Spark conf of the DAGs' jobs: kmigrate's launch settings, no console progress bar in the task log
JOB_CONF = {**LAUNCH_CONF, "spark.ui.showConsoleProgress": "false"}
# the client config file's name, in the driver's working directory on YARN in cluster mode
CLIENTS_FILE = "kmigrate-clients.json"
# on Kubernetes in cluster mode: "SECRET:KEY", the Kubernetes secret holding the client configs
# (the JSON of KMIGRATE_CLIENTS_JSON) that the driver pod gets as that environment variable
K8S_CLIENTS_SECRET_ENV = "KMIGRATE_K8S_CLIENTS_SECRET"


class LaunchedJob(Protocol):
    """What a job is launched with: SparkSubmitOperator's attributes of these names (the Spark task
    operator is one), or a SparkJob. The launch sets `env_vars`, and on YARN and Kubernetes adds to
    `application_args`, `files` and `conf`."""

    application: str
    application_args: list[str] | None
    conf: dict[str, Any] | None
    files: str | None
    env_vars: dict[str, Any] | None
    source_conn_id: str
    target_conn_id: str
    spark_connect_conn_id: str

    def _get_hook(self) -> SparkSubmitHook: ...


@dataclasses.dataclass
class SparkJob:
    """A job launched apart from a Spark task (the cutover sensor's catch-up round), on the
    `conn_id` Spark connection as the DAGs' Spark tasks are."""

    application: str
    application_args: list[str]
    source_conn_id: str
    target_conn_id: str
    spark_connect_conn_id: str = ""
    conn_id: str = "spark_default"
    source_connect_conn_id: str = ""  # the mirror's, when it keeps connectors: handed with the client configs
    conf: dict[str, Any] | None = dataclasses.field(default_factory=lambda: dict(JOB_CONF))
    files: str | None = None
    env_vars: dict[str, Any] | None = None

    @classmethod
    def of(cls, request: RunRequest, application: str, application_args: list[str], **more: Any) -> SparkJob:
        """A job of the run's `request`: its Kafka clusters' and Spark Connect server's connections."""
        more.setdefault("spark_connect_conn_id", request.spark.connect_conn_id)
        return cls(application, application_args, request.source_kafka_conn_id, request.target_kafka_conn_id, **more)

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook for this job, as SparkSubmitOperator builds it (and its default name)."""
        return SparkSubmitHook(conf=self.conf, conn_id=self.conn_id, files=self.files, name="arrow-spark",
                               application_args=self.application_args, env_vars=self.env_vars)


def launch(job: LaunchedJob, log: logging.Logger, *, submit: Callable[[], None] | None = None,
           started: Callable[[subprocess.Popen], None] | None = None) -> None:
    """Run `job` to its end: on the server of its Spark Connect connection, when that connection
    exists (`run_on_connect`; `started` is handed the client process, to stop it when the task is
    killed), else under spark-submit by `submit` (by default the job's hook; the operator passes
    the provider's own execute) with the client configs handed over (`hand_clients`). Raises AirflowFailException when the job refused to go on
    (FINAL_EXIT: a retry cannot help), AirflowException when it failed otherwise."""
    source, target, python, remote = _resolved(job)
    # the job's own --remote default ($KMIGRATE_SPARK_REMOTE) must not send a spark-submit job there too
    job.env_vars = {**(job.env_vars or {}), "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python,
                    REMOTE_ENV: ""}
    if remote:
        job.env_vars[CLIENTS_ENV] = clients_json(source, target)
        run_on_connect(job, remote, python, log, started)
        return
    folder = hand_clients(job, source, target)
    try:
        (submit or (lambda: job._get_hook().submit(job.application)))()
    except AirflowException as exc:  # the hook names the exit code of spark-submit (the driver's in client mode)
        if f"Error code is: {FINAL_EXIT}." in str(exc):
            raise AirflowFailException(f"{Path(job.application).name} refused to go on (exit code {FINAL_EXIT}): "
                                       "a retry cannot help; see its output above") from exc
        raise
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)


def _resolved(job: LaunchedJob) -> tuple[ClusterConfig, ClusterConfig, str, str | None]:
    """What a launch resolves when the job runs: the two Kafka clusters from their connections, the
    driver's Python (this worker's), and the Spark Connect server's URL (None without one; its token
    masked in every log line)."""
    return (kafka_cluster(job.source_conn_id, "source"), kafka_cluster(job.target_conn_id, "target"),
            os.environ.get("PYSPARK_PYTHON", sys.executable), spark_connect_url(job.spark_connect_conn_id))


def start_detached(job: LaunchedJob, log: logging.Logger, output: Path) -> int:
    """Start a long-running job (the mirror) and return its process id without waiting for it: a
    client of the Spark Connect connection's server, else spark-submit on spark_default in client
    mode (the driver on this worker; a YARN or Kubernetes cluster-mode driver would need the client
    configs' file or secret for longer than the launch: refused, use a Spark Connect server). Its
    own session, so that the task's end does not end it; its output appended to `output`."""
    source, target, python, remote = _resolved(job)
    connect = getattr(job, "source_connect_conn_id", "")
    env = {**os.environ, "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python, REMOTE_ENV: remote or "",
           CLIENTS_ENV: clients_json(source, target, KafkaConnectHook(connect).settings() if connect else None)}
    if remote:
        command = [python, job.application, *(job.application_args or [])]
        log.info("starting %s as a client of the Spark Connect server %s", Path(job.application).name,
                 shown_remote(remote))
    else:
        hook = job._get_hook()
        if hook._connection["deploy_mode"] == "cluster":
            raise AirflowFailException(f"{Path(job.application).name} runs until it is stopped: on spark-submit it "
                                       "runs in client mode only (its driver on this worker); give a Spark Connect "
                                       "connection, or set spark_default's deploy mode to client")
        command = hook._build_spark_submit_command(job.application)  # the provider's command line, secrets aside
        log.info("starting %s with spark-submit on %s", Path(job.application).name, hook._connection["master"])
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "a") as out:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    log.info("%s started, process %d on this worker, its output in %s", Path(job.application).name, process.pid,
             output)
    return process.pid


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


def hand_clients(job: LaunchedJob, source: ClusterConfig, target: ClusterConfig) -> str | None:
    """Give the spark-submit job its client configs: in its environment, or where SparkSubmitHook
    would put that on the command line (a YARN or Kubernetes master) as `clients_handoff` says.
    Returns the owner-only folder of the client config file, for the caller to delete."""
    connection = job._get_hook()._connection  # the master and deploy mode, as the hook reads them
    if "yarn" not in connection["master"] and "k8s" not in connection["master"]:
        job.env_vars = {**(job.env_vars or {}), CLIENTS_ENV: clients_json(source, target)}
        return None
    folder = tempfile.mkdtemp(prefix="kmigrate-clients-")  # mode 700
    try:
        clients_file = write_clients(Path(folder) / CLIENTS_FILE, source, target)  # mode 600
        args, files, conf = clients_handoff(connection["master"], connection["deploy_mode"], str(clients_file),
                                            os.environ.get(K8S_CLIENTS_SECRET_ENV))
    except ConfigError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise AirflowFailException(str(exc)) from exc
    job.application_args = [*(job.application_args or []), *args]
    job.files = ",".join(f for f in [job.files, *files] if f) or None
    job.conf = {**(job.conf or {}), **conf}
    return folder


def run_on_connect(job: LaunchedJob, remote: str, python: str, log: logging.Logger,
                   started: Callable[[subprocess.Popen], None] | None = None) -> None:
    """Run the job as a client of the Spark Connect server at `remote`, its output in the task log;
    `started` is handed the client process. The server's URL goes in the job's environment, not its
    command line."""
    name = Path(job.application).name
    shown = shown_remote(remote)
    log.info("running %s as a client of the Spark Connect server %s", name, shown)
    client = subprocess.Popen(
        [python, job.application, *(job.application_args or [])],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, **(job.env_vars or {}), REMOTE_ENV: remote})
    if started is not None:
        started(client)
    assert client.stdout is not None
    for line in client.stdout:
        log.info("%s", line.rstrip())
    check_exit(name, client.wait(), shown)


def check_exit(name: str, code: int, shown: str) -> None:
    """A Spark Connect job's exit code as the task's outcome: FINAL_EXIT (it refused to go on) fails
    the task without a retry, any other but 0 fails it (a retry may help)."""
    if code == FINAL_EXIT:
        raise AirflowFailException(f"{name} refused to go on (exit code {code}): a retry cannot help; see its output "
                                   "above")
    if code != 0:
        raise AirflowException(f"{name} on the Spark Connect server {shown} exited with code {code}; "
                               "its output is in the lines above")


def stop_client(client: subprocess.Popen | None) -> bool:
    """Stop a job's Spark Connect client when its task is killed (the job closes its session; the
    server stops the session's tasks). False when there was none."""
    if client is None:
        return False
    if client.poll() is None:
        client.terminate()
    return True
