"""No secret on a Spark job's command line nor in a log line (pure logic: the command lines are
built, not run): on YARN and Kubernetes, where SparkSubmitHook would turn the environment variable
KMIGRATE_CLIENTS_JSON into `--conf spark.yarn.appMasterEnv...=`, the client configs go in an
owner-only file (or a Kubernetes secret); a Spark Connect connection's token goes to the job in its
server's URL in its environment, and log lines show the URL without it."""
from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import uuid
from pathlib import Path

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.errors import ConfigError
from kmigrate_spark.clients import CLIENTS_ENV, load_clients
from kmigrate_spark.conf import LAUNCH_CONF, REMOTE_ENV

PASSWORDS = {"source": f"src-pw-{uuid.uuid4().hex}", "target": f"tgt-pw-{uuid.uuid4().hex}"}


def cluster(role: str) -> ClusterConfig:
    return ClusterConfig(role, {"bootstrap.servers": f"{role}:9093", "security.protocol": "SASL_SSL",
                                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "migrator",
                                "sasl.password": PASSWORDS[role], "ssl.ca.location": "/etc/kafka/ca.pem"})


def spark_task(monkeypatch, master: str, deploy_mode: str | None):
    from kmigrate_airflow.operators import KmigrateSparkSubmitOperator

    extra = {"deploy-mode": deploy_mode} if deploy_mode else {}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_UNDER_TEST", json.dumps({"conn_type": "spark", "host": master,
                                                                    "extra": extra}))
    task = KmigrateSparkSubmitOperator(
        task_id="copy", application="/opt/kmigrate/spark_jobs/copy_partitions.py", conn_id="spark_under_test",
        source_conn_id="kafka_source", target_conn_id="kafka_target", conf={**LAUNCH_CONF},
        application_args=["--state-location", "/state", "--run-id", "r1"])
    # as execute sets them before handing the clients over
    task.env_vars = {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, REMOTE_ENV: ""}
    return task


def command_line(task) -> list[str]:
    return task._get_hook()._build_spark_submit_command(task.application)


def test_the_hook_alone_would_put_the_client_configs_on_a_yarn_command_line(monkeypatch):
    """Why: the provider's own behaviour with an environment variable on a YARN master."""
    task = spark_task(monkeypatch, "yarn", "cluster")
    task.env_vars[CLIENTS_ENV] = json.dumps({"source": dict(cluster("source").settings)})
    assert PASSWORDS["source"] in " ".join(command_line(task))


@pytest.mark.parametrize("deploy_mode", ["cluster", "client"])
def test_on_yarn_the_spark_submit_command_line_holds_no_secret(monkeypatch, deploy_mode):
    from kmigrate_airflow.launch import CLIENTS_FILE, hand_clients

    task = spark_task(monkeypatch, "yarn", deploy_mode)
    folder = hand_clients(task, cluster("source"), cluster("target"))
    try:
        cmd = command_line(task)
        shown = " ".join(cmd)
        assert cmd[:3] == ["spark-submit", "--master", "yarn"]
        assert not [p for p in PASSWORDS.values() if p in shown], shown
        assert CLIENTS_ENV not in shown and "sasl" not in shown
        assert "spark.yarn.appMasterEnv.PYSPARK_PYTHON" in shown  # the other variables still go this way
        file = Path(folder) / CLIENTS_FILE
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and stat.S_IMODE(os.stat(file).st_mode) == 0o600
        source, target = load_clients(file)
        assert source.settings["sasl.password"] == PASSWORDS["source"]
        assert target.settings["sasl.password"] == PASSWORDS["target"]
        if deploy_mode == "cluster":  # shipped with the job, read in the driver container's working directory
            assert cmd[cmd.index("--files") + 1] == str(file)
            assert cmd[-2:] == ["--clients", CLIENTS_FILE]
        else:  # the driver runs on this worker
            assert "--files" not in cmd and cmd[-2:] == ["--clients", str(file)]
    finally:
        shutil.rmtree(folder)


def test_on_a_local_or_standalone_master_the_clients_stay_in_the_environment(monkeypatch):
    task = spark_task(monkeypatch, "local[2]", None)
    from kmigrate_airflow.launch import hand_clients

    assert hand_clients(task, cluster("source"), cluster("target")) is None
    assert json.loads(task.env_vars[CLIENTS_ENV])["target"]["sasl.password"] == PASSWORDS["target"]
    hook = task._get_hook()
    shown = " ".join(hook._build_spark_submit_command(task.application))
    assert "--clients" not in shown and not [p for p in PASSWORDS.values() if p in shown]
    assert hook._env[CLIENTS_ENV] == task.env_vars[CLIENTS_ENV]  # spark-submit's environment (Popen), as before


def test_kubernetes_handoff():
    from kmigrate_airflow.launch import clients_handoff

    master = "k8s://https://kube:6443"
    assert clients_handoff(master, "client", "/tmp/x/kmigrate-clients.json") == (
        ["--clients", "/tmp/x/kmigrate-clients.json"], [], {})
    assert clients_handoff(master, "cluster", "/tmp/x/kmigrate-clients.json", "kmigrate-clients:clients.json") == (
        [], [], {f"spark.kubernetes.driver.secretKeyRef.{CLIENTS_ENV}": "kmigrate-clients:clients.json"})
    with pytest.raises(ConfigError, match="KMIGRATE_K8S_CLIENTS_SECRET=SECRET:KEY"):
        clients_handoff(master, "cluster", "/tmp/x/kmigrate-clients.json")


def test_a_spark_connect_token_is_in_no_command_line_nor_log_line(tmp_path, capfd, monkeypatch):
    from kmigrate_airflow.launch import launch
    from kmigrate_airflow.operators import KmigrateSparkSubmitOperator

    token = f"tok{uuid.uuid4().hex}"
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_UNDER_TEST", json.dumps(
        {"conn_type": "spark_connect", "host": "127.0.0.1", "port": 15002, "password": token,
         "extra": {"use_ssl": True}}))
    remote = f"sc://127.0.0.1:15002/;token={token};use_ssl=True"  # as the connection gives it
    job = tmp_path / "copy_partitions.py"  # stands in for the job: what it got, then exit 1 (a failure's message)
    job.write_text("import os, sys\n"
                   f"print('args', ' '.join(sys.argv[1:]), 'remote from env:', os.environ[{REMOTE_ENV!r}] == {remote!r})\n"
                   "sys.exit(1)\n")
    task = KmigrateSparkSubmitOperator(task_id="copy", application=str(job), application_args=["--run-id", "r1"],
                                       source_conn_id="kafka_source", target_conn_id="kafka_target",
                                       spark_connect_conn_id="spark_connect_under_test")
    task.env_vars = {}
    from airflow.exceptions import AirflowException

    with pytest.raises(AirflowException, match=r"sc://127.0.0.1:15002/;token=\*\*\*;use_ssl=True exited") as raised:
        launch(task, task.log)
    out, err = capfd.readouterr()
    assert "args --run-id r1 remote from env: True" in out + err
    assert token not in out + err and token not in str(raised.value)
    assert "token=***" in out + err  # the log line that names the server
