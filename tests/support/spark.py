"""The Spark jobs as the tests run them: through a real `spark-submit` of the pinned pyspark, with a
run's plan and client file written first, and what the jobs recorded in the run's state."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from kmigrate.manifest import Manifest
from kmigrate.run.copying.plan import build_plan
from kmigrate_spark.clients import write_clients
from kmigrate_spark.conf import submit_args

from tests.support.kafka import seed_plain
from tests.support.stack import PROJECT_DIR, load_spark_cluster_module

SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")


def job_arguments(job: str, state: Path, run_id: str, clients: Path) -> list[str]:
    """The job's script and the arguments every run of it takes: spark_jobs/JOB.py --state-location
    STATE --run-id RUN --clients CLIENTS."""
    return [str(PROJECT_DIR / "spark_jobs" / f"{job}.py"), "--state-location", str(state), "--run-id", run_id,
            "--clients", str(clients)]


def spark_submit(job: str, state: Path, run_id: str, clients: Path, *extra: str, master: str = "local[2]",
                 env: dict[str, str] | None = None, conf: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                   **(env or {})}
    return subprocess.run(
        [SPARK_SUBMIT, "--master", master, *submit_args({"spark.ui.enabled": "false"}),
         *(arg for setting in conf for arg in ("--conf", setting)), *job_arguments(job, state, run_id, clients), *extra],
        capture_output=True, text=True, timeout=600, env=environment, cwd=PROJECT_DIR)


def run_client(job: str, state: Path, clients: Path, remote: str, *extra: str,
               run_id: str = "run-1") -> subprocess.CompletedProcess:
    """The job as a Python client of the Spark Connect server at `remote` (`python spark_jobs/JOB.py
    --remote ...`): no spark-submit, no JVM in its process."""
    return subprocess.run([sys.executable, *job_arguments(job, state, run_id, clients), "--remote", remote, *extra],
                          capture_output=True, text=True, timeout=600, cwd=PROJECT_DIR)


def output(result: subprocess.CompletedProcess) -> str:
    return result.stdout + result.stderr  # spark-submit merges the Python driver's stderr into stdout


def attempts(manifest: Manifest, kind: str) -> list[dict]:
    return [manifest.read(p) for p in manifest.parts() if p.startswith(f"{kind}/")]


def make_run(stack, tmp_path: Path, topics: list[str], run_id: str = "run-1") -> tuple[Manifest, Path]:
    manifest = Manifest(str(tmp_path / "state"), run_id)
    manifest.write_once("plan", build_plan(stack.source, topics))
    return manifest, write_clients(tmp_path / "clients.json", stack.source, stack.target)


def seed_workload(stack, name: str, topics: int = 3, partitions: int = 4, per_partition: int = 500) -> list[str]:
    names = [f"{name}-{i}" for i in range(topics)]
    for topic in names:
        seed_plain(stack.source, topic, partitions=partitions, per_partition=per_partition)
    return names


@contextlib.contextmanager
def airflow_connect_server(state: Path, master: str, port: int, ui_port: int, conn_id: str,
                           memory: str = "1g") -> Iterator[tuple[ModuleType, Any]]:
    """A Spark Connect server on `port` (no UI: the tests read none), started here and known to
    Airflow as the connection `conn_id` (in this process's environment) until it is stopped again,
    by pid, on the way out. Yields stack/spark_cluster.py and the server's service, to restart it."""
    module = load_spark_cluster_module()
    service = module.connect_service(state, master, port, ui_port, Path(sys.executable), memory=memory)
    service.conf["spark.ui.enabled"] = "false"
    assert module.connect_up(service, Path(sys.executable), timeout_s=300)
    patch = pytest.MonkeyPatch()
    patch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}",
                 json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": port}))
    try:
        yield module, service
    finally:
        patch.undo()
        module.down([service])
    assert service.pid() is None
