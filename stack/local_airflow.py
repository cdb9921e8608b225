"""A local Airflow for the demo, the DAG tests and `make airflow-up`: an AIRFLOW_HOME with SQLite, this
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
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from stack_common import PROJECT_DIR, poll_until  # beside it: its importers have stack/ on sys.path
from local_prometheus import EXPORTER_PORT, Monitoring
from local_prometheus import PORT as PROMETHEUS_PORT

COPY_POOL = "kafka_migration_copy"


def connections(source_bootstrap: str, target_bootstrap: str, source_connect: str, target_connect: str,
                spark_master: str = "local[2]", spark_connect: str | None = None) -> dict[str, str]:
    """The connections the DAGs use by default, as AIRFLOW_CONN_* variables: the two Kafka clusters,
    the two Connect workers, spark_default on `spark_master`, and, given a Spark Connect server's URL
    (`spark_connect`, sc://HOST:PORT), spark_connect_default, so that the Spark jobs run on it."""
    def http(url: str) -> str:
        scheme, rest = url.split("://", 1)
        host, _, port = rest.rstrip("/").partition(":")
        return json.dumps({"conn_type": "http", "host": host, "port": int(port or 80), "schema": scheme})

    conns = {
        "AIRFLOW_CONN_KAFKA_SOURCE": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": source_bootstrap}}),
        "AIRFLOW_CONN_KAFKA_TARGET": json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": target_bootstrap}}),
        "AIRFLOW_CONN_CONNECT_SOURCE": http(source_connect),
        "AIRFLOW_CONN_CONNECT_TARGET": http(target_connect),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": spark_master}),
    }
    if spark_connect:
        conns["AIRFLOW_CONN_SPARK_CONNECT_DEFAULT"] = spark_connect_connection(spark_connect)
    return conns


def spark_connect_connection(url: str) -> str:
    """The Airflow connection (JSON, the Spark provider's type spark_connect) of the Spark Connect
    server at `url`, sc://HOST:PORT[/;token=...;user_id=...;use_ssl=true]."""
    if not url.startswith("sc://"):
        raise ValueError(f"{url!r} is not a Spark Connect URL: give sc://HOST:PORT")
    address, _, options = url[len("sc://"):].partition("/")
    host, colon, port = address.rpartition(":")
    if not colon:
        host, port = address, ""
    settings = {key: urllib.parse.unquote(value) for key, _, value in
                (option.partition("=") for option in options.split(";") if "=" in option)}
    conn: dict[str, Any] = {"conn_type": "spark_connect", "host": host, "port": int(port or 15002)}
    if settings.get("token"):
        conn["password"] = settings["token"]
    if settings.get("user_id"):
        conn["login"] = settings["user_id"]
    if "use_ssl" in settings:
        conn["extra"] = {"use_ssl": settings["use_ssl"].lower() == "true"}
    return json.dumps(conn)


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


def dag_test(dag: Any, conf: Mapping[str, Any], idle_s: float = 0.05) -> Any:
    """`dag.test(run_conf=conf)`, whose loop sleeps 1 s whenever no task is ready to run: once for
    each layer of tasks a failure or a skip marks upstream_failed or skipped, and between the pokes
    of a sensor in reschedule mode. Here those idle waits are `idle_s`, so that a run refused by its
    first task ends in a second rather than ten. Only dag.test's own calls are shortened: a task
    that sleeps (a sensor sampling, a step waiting) sleeps as long as it asks."""
    real_sleep = time.sleep
    test_code = type(dag).test.__code__

    def sleep(seconds: float) -> None:
        real_sleep(min(seconds, idle_s) if sys._getframe(1).f_code is test_code else seconds)

    time.sleep = sleep
    try:
        return dag.test(run_conf=dict(conf))
    finally:
        time.sleep = real_sleep


def api(url: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
    """GET /api/v2{path} of the local Airflow at `url` (all-admins mode: a token without a
    password), or POST `body` there when given."""
    with urllib.request.urlopen(f"{url}/auth/token", timeout=10) as resp:
        token = json.load(resp)["access_token"]
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}/api/v2{path}", data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.load(resp)


def trigger(url: str, dag_id: str, conf: Mapping[str, Any]) -> str:
    """Trigger `dag_id` with `conf` through the REST API, as the UI's trigger button does; its run id."""
    return api(url, f"/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": dict(conf)})["dag_run_id"]


def wait_for_run(url: str, dag_id: str, run_id: str, timeout_s: float) -> str:
    """The run's final state ("success" or "failed"), polled through the REST API."""
    path = f"/dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}"
    state: dict[str, str] = {}

    def ended() -> bool:
        state["now"] = api(url, path)["state"]
        return state["now"] in ("success", "failed")

    poll_until(ended, timeout_s, interval_s=0.5, timed_out=lambda: TimeoutError(
        f"the {dag_id} run {run_id} is still {state.get('now')} after {timeout_s:.0f}s (see the UI at {url})"))
    return state["now"]


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
    with the LocalExecutor, dag-processor and triggerer, each a process of its own session, all sharing an
    environment built from this process's (see `configure`) with `home` as AIRFLOW_HOME and
    SQLite under it. Every user is an admin (the simple auth manager's all-admins mode): for a
    laptop or a test, never for a shared machine. `stop()` ends exactly the processes it started."""

    COMMANDS = {"api-server": ["api-server", "--port", "{port}", "--host", "127.0.0.1", "--workers", "1"],
                "scheduler": ["scheduler"], "dag-processor": ["dag-processor"],
                "triggerer": ["triggerer"]}  # runs the deferred tasks' triggers (kafka_dr_mirror's follow)

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

    def api(self, path: str) -> Any:
        """GET /api/v2{path}, with a token the all-admins mode hands out without a password."""
        return api(self.url, path)

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/api/v2/monitor/health", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    def wait_until(self, condition, what: str, timeout_s: float) -> None:
        def ready() -> bool:
            if condition():
                return True
            dead = [name for name, proc in self.processes.items() if proc.poll() is not None]
            if dead:
                raise RuntimeError(f"Airflow {', '.join(dead)} exited; see {self.home}/<name>.log")
            return False

        poll_until(ready, timeout_s, timed_out=lambda: TimeoutError(
            f"{what} not ready after {timeout_s:.0f}s; see the logs in {self.home}"))

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


# ---------------------------------------------------------------- make airflow-up / airflow-down

UI_HOME = PROJECT_DIR / ".stack" / "airflow-ui"
UI_PORT = 18280
LOCAL_STACK = ("localhost:19092", "localhost:29092", "http://localhost:18083", "http://localhost:28083")


def _pid_file(home: Path) -> Path:
    return home / "pids.json"


def _ours(pid: int) -> bool:
    """Whether `pid` still runs an airflow command, or one of its Prometheus's under AIRFLOW_HOME (not a
    pid the system gave to something else)."""
    try:
        return b"airflow" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def up(home: Path = UI_HOME, port: int = UI_PORT, spark_connect: str | None = None,
       prometheus_port: int = PROMETHEUS_PORT, exporter_port: int = EXPORTER_PORT) -> int:
    """Start the api-server, scheduler, dag-processor and triggerer for the local stack, unless they run; with
    `spark_connect` (a Spark Connect server's sc:// URL) the connection spark_connect_default names
    it, so that the DAGs' Spark jobs run there."""
    pids = _pid_file(home)
    if pids.exists() and all(_ours(pid) for pid in json.loads(pids.read_text()).values()):
        print(f"airflow: already running at http://127.0.0.1:{port} (make airflow-down stops it)")
        return 0
    configure(home, connections(*LOCAL_STACK, spark_connect=spark_connect))
    server = LocalAirflow(home, port)
    try:
        server.start()
    except (RuntimeError, TimeoutError) as exc:
        server.stop()
        print(f"airflow: error: {exc}", file=sys.stderr)
        return 1
    started = {name: proc.pid for name, proc in server.processes.items()}
    state = home / "kmigrate-state"  # the DAGs' default state location under this AIRFLOW_HOME
    state.mkdir(parents=True, exist_ok=True)
    try:  # Prometheus beside it, scraping the exporter of the runs' manifests, the alert rules loaded
        monitoring = Monitoring(home / "prometheus", str(state), port=prometheus_port, exporter_port=exporter_port,
                                scrape_s=5.0).start()
        started.update({f"monitoring-{name}": pid for name, pid in monitoring.pids().items()})
    except (RuntimeError, TimeoutError) as exc:
        print(f"airflow: Prometheus did not start ({exc}); Airflow runs without it", file=sys.stderr)
        monitoring = None
    pids.write_text(json.dumps(started))
    print(f"airflow: the UI is at {server.url} (no login: every visitor is an admin; keep it local)")
    if monitoring is not None:
        print(f"airflow: Prometheus at {monitoring.url} (alerts: {monitoring.url}/alerts), scraping the mirrors' and runs' metrics "
              f"at http://127.0.0.1:{monitoring.exporter_port}/metrics")
    print("airflow: DAGs kafka_migration, kafka_migration_rollback, kafka_dr_drill, kafka_dr_mirror, kafka_dr_failover, kafka_move_consumers, kafka_move_producers; "
          "connections kafka_source, "
          "kafka_target, connect_source, connect_target, spark_default"
          + (f", spark_connect_default ({spark_connect}: the Spark jobs run there)" if spark_connect else "")
          + f"; pool {COPY_POOL}; logs in {home}")
    return 0


def down(home: Path = UI_HOME, timeout_s: float = 30.0) -> int:
    """Stop exactly the processes `up` started (their process groups), by the pids it recorded."""
    pids = _pid_file(home)
    if not pids.exists():
        print("airflow: not running (nothing recorded by make airflow-up)")
        return 0
    recorded = json.loads(pids.read_text())
    mine = {name: pid for name, pid in recorded.items() if _ours(pid)}
    for pid in mine.values():
        os.killpg(pid, signal.SIGTERM)
    poll_until(lambda: not any(_ours(pid) for pid in mine.values()), timeout_s, interval_s=0.2)
    for pid in mine.values():
        try:  # what is left of each session (executor workers, api-server workers)
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    pids.unlink()
    print(f"airflow: stopped {', '.join(f'{name} (pid {pid})' for name, pid in mine.items()) or 'nothing still running'}")
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="A local Airflow UI for the local stack (make airflow-up / airflow-down)")
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--home", type=Path, default=UI_HOME, help=f"its AIRFLOW_HOME (default {UI_HOME})")
    parser.add_argument("--port", type=int, default=UI_PORT, help=f"the api-server's port (default {UI_PORT})")
    parser.add_argument("--spark-connect", metavar="sc://HOST:PORT",
                        help="a Spark Connect server for the DAGs' Spark jobs (the connection spark_connect_default); "
                             "without it they run with spark-submit on spark_default")
    parser.add_argument("--prometheus-port", type=int, default=PROMETHEUS_PORT,
                        help=f"the Prometheus server's port (default {PROMETHEUS_PORT})")
    parser.add_argument("--exporter-port", type=int, default=EXPORTER_PORT,
                        help=f"the mirrors' metrics exporter's port (default {EXPORTER_PORT})")
    args = parser.parse_args()
    sys.exit(up(args.home, args.port, args.spark_connect, args.prometheus_port, args.exporter_port)
             if args.action == "up" else down(args.home))
