"""A local Airflow for the demo and the DAG tests: a throw-away AIRFLOW_HOME with SQLite, this
project's dags/ and plugins/, connections for the local stack given as AIRFLOW_CONN_* environment
variables, and the copy pool. Import nothing from Airflow before `configure()` has run: Airflow
reads its configuration when it is first imported."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[2]
COPY_POOL = "kafka_migration_copy"


def connections(source_bootstrap: str, target_bootstrap: str, source_connect: str, target_connect: str,
                spark_master: str = "local[2]") -> dict[str, str]:
    def http(url: str) -> str:
        scheme, rest = url.split("://", 1)
        host, _, port = rest.rstrip("/").partition(":")
        return json.dumps({"conn_type": "http", "host": host, "port": int(port or 80), "schema": scheme})

    return {
        "AIRFLOW_CONN_KAFKA_SOURCE": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": source_bootstrap}}),
        "AIRFLOW_CONN_KAFKA_TARGET": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": target_bootstrap}}),
        "AIRFLOW_CONN_CONNECT_SOURCE": http(source_connect),
        "AIRFLOW_CONN_CONNECT_TARGET": http(target_connect),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
    }


def configure(home: Path, conns: Mapping[str, str]) -> dict[str, str]:
    """Set the environment of this process (and its children) for a local Airflow at `home`."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_DIR / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_DIR / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        # spark-submit and the Spark Python workers come from this interpreter's environment
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        **conns,
    }
    os.environ.update(env)
    if str(PROJECT_DIR / "plugins") not in sys.path:
        sys.path.insert(0, str(PROJECT_DIR / "plugins"))
    return env


def migrate_db(home: Path) -> None:
    """Create the SQLite metadata database (once per home) and the copy pool."""
    marker = home / ".kmigrate-db-ready"
    if marker.exists():
        return
    _create_db(dict(os.environ))
    marker.write_text("ok\n")


def _create_db(env: Mapping[str, str]) -> None:
    airflow = str(Path(sys.executable).parent / "airflow")
    for command in ([airflow, "db", "migrate"],
                    [airflow, "pools", "set", COPY_POOL, "2", "Spark copy and verify jobs of kafka_migration"]):
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[1:])} failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


class LocalAirflow:
    """A local Airflow that a browser can use: api-server (UI and REST API) on `port`, scheduler
    with the LocalExecutor and dag-processor, each a process of its own session, all sharing an
    environment built from this process's (see `configure`) with `home` as AIRFLOW_HOME and
    SQLite under it. Every user is an admin (the simple auth manager's all-admins mode): for a
    laptop or a test, never for a shared machine. `stop()` ends exactly the processes it started."""

    COMMANDS = {"api-server": ["api-server", "--port", "{port}", "--host", "127.0.0.1", "--workers", "1"],
                "scheduler": ["scheduler"], "dag-processor": ["dag-processor"]}

    def __init__(self, home: Path, port: int) -> None:
        self.home, self.port = home, port
        self.url = f"http://127.0.0.1:{port}"
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.url}/execution/",
            "AIRFLOW__API__BASE_URL": self.url,
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        }
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, timeout_s: float = 180.0) -> LocalAirflow:
        self.home.mkdir(parents=True, exist_ok=True)
        _create_db(self.env)
        airflow = str(Path(sys.executable).parent / "airflow")
        for name, args in self.COMMANDS.items():
            log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - the process keeps it
            self.processes[name] = subprocess.Popen([airflow, *[a.format(port=self.port) for a in args]],
                                                    stdout=log, stderr=subprocess.STDOUT, env=self.env,
                                                    start_new_session=True)
        self.wait_until(self.healthy, f"the Airflow api-server at {self.url}", timeout_s)
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_until(self, condition, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            dead = [name for name, proc in self.processes.items() if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"Airflow {', '.join(dead)} exited; see {self.home}/<name>.log")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s; see the logs in {self.home}")
            time.sleep(0.5)

    def stop(self, timeout_s: float = 30.0) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:  # what is left of each session (executor workers, api-server workers)
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
