#!/usr/bin/env python3
"""Start, stop and inspect a real Spark standalone cluster on localhost: one master and N workers,
run from the pinned pyspark install (its `spark-class`), so the Spark jobs can be tested against a
cluster manager and not only `local[*]`; and a Spark Connect server, a long-running Spark
application the jobs can run on as plain Python clients.

    python3 stack/spark_cluster.py up [--workers 2]   # start what is not running, wait for the workers
    python3 stack/spark_cluster.py status
    python3 stack/spark_cluster.py down
    python3 stack/spark_cluster.py connect-up [--connect-master 'local[4,4]']
    python3 stack/spark_cluster.py connect-down

Jobs then run with `spark-submit --master spark://127.0.0.1:17077`, or with
`python spark_jobs/JOB.py --remote sc://127.0.0.1:15002`. Standard library only; the processes are
tracked by pid under .stack/spark/ and stopped by pid, like stack.py's.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stack_common import PROJECT_DIR, StackError, poll_until  # noqa: E402
from stack_install import check_java  # noqa: E402
from stack_services import PidTracked, port_open, stop, tail  # noqa: E402

sys.path.insert(0, str(PROJECT_DIR / "include"))  # standard library only, as this script runs outside the venv
from kmigrate_spark.conf import LAUNCH_CONF  # noqa: E402

DEFAULT_STATE_DIR = PROJECT_DIR / ".stack" / "spark"
DEFAULT_PYTHON = PROJECT_DIR / ".venv" / "bin" / "python"
MASTER_PORT = 17077
MASTER_UI_PORT = 18090
DAEMON_MEMORY = "256m"
CONNECT_PORT = 15002
CONNECT_UI_PORT = 14040
CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
SPARK_DAEMON_MODULE = "kmigrate_spark.daemon"  # the same module the jobs set under spark-submit (kmigrate_spark/session.py)


@dataclasses.dataclass
class SparkService(PidTracked):
    name: str
    state_dir: Path
    ports: list[int]
    arguments: list[str]
    conf: dict[str, str] = dataclasses.field(default_factory=dict)
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    memory: str = DAEMON_MEMORY

    @property
    def log_file(self) -> Path:
        return self.dir / "stdout.log"


def cluster_services(state_dir: Path, workers: int, master_port: int, ui_port: int,
                     worker_cores: int, worker_memory: str) -> list[SparkService]:
    master_url = f"spark://127.0.0.1:{master_port}"
    master = SparkService("spark-master", state_dir, [master_port, ui_port], [
        "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(master_port),
        "--webui-port", str(ui_port), "--properties-file", str(state_dir / "spark-master" / "spark.conf")])
    out = [master]
    for i in range(1, workers + 1):
        ui, rpc = ui_port + i, master_port + i
        out.append(SparkService(f"spark-worker-{i}", state_dir, [rpc, ui], [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--port", str(rpc), "--webui-port", str(ui),
            "--cores", str(worker_cores), "--memory", worker_memory,
            "--work-dir", str(state_dir / f"spark-worker-{i}" / "work"),
            "--properties-file", str(state_dir / f"spark-worker-{i}" / "spark.conf"), master_url]))
    return out


def connect_service(state_dir: Path, master: str, port: int, ui_port: int, python: Path,
                    memory: str = "1g") -> SparkService:
    """A Spark Connect server: a Spark application on `master` (local[N,F]: N task slots, F
    attempts per task) serving gRPC clients on `port`, its Python workers from `python`."""
    return SparkService("spark-connect", state_dir, [port, ui_port], [
        "org.apache.spark.deploy.SparkSubmit", "--class", CONNECT_SERVER, "--name", "kmigrate Spark Connect server",
        "--master", master, "--driver-memory", memory,
        "--properties-file", str(state_dir / "spark-connect" / "spark.conf"), "spark-internal"],
        conf={"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(port),
              "spark.ui.port": str(ui_port),
              # its Python workers fork from a daemon that has imported kmigrate (kmigrate_spark/daemon.py)
              "spark.python.daemon.module": SPARK_DAEMON_MODULE,
              # INFO logs several lines a task and a request (about 40,000 lines a bench-mm2 run);
              # the tasks' own progress lines go to the log either way (the executors' stderr)
              "spark.log.level": "WARN",
              # the driver JVM's JIT and GC options, as every kmigrate launch (kmigrate_spark/conf.py)
              **LAUNCH_CONF},
        # the server runs its clients' Python functions with $PYSPARK_PYTHON (not spark.pyspark.python)
        env={"PYSPARK_PYTHON": str(python), "PYSPARK_DRIVER_PYTHON": str(python)}, memory=memory)


def spark_home(python: Path) -> Path:
    if not python.exists():
        raise StackError(f"{python} does not exist; run `make install` first (it installs the pinned pyspark)")
    found = subprocess.run([str(python), "-c", "import os, pyspark; print(os.path.dirname(pyspark.__file__))"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        raise StackError(f"{python} cannot import pyspark; run `make install` first")
    return Path(found.stdout.strip())


def master_state(ui_port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=2) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def launch(service: SparkService, home: Path, java: str) -> subprocess.Popen:
    service.dir.mkdir(parents=True, exist_ok=True)
    for port in service.ports:
        if port_open(port):
            raise StackError(f"{service.name}: port {port} is already taken by another process; free it "
                             f"(`ss -ltnp 'sport = :{port}'` shows which) or pick other ports with --master-port/--ui-port")
    # Fixed ports only, and a taken one is an error: Spark would otherwise move to the next free
    # port (and a random RPC port can land on a UI port). The properties file's path also names
    # the service directory on the command line (process_is_ours).
    conf = {"spark.port.maxRetries": "0", "spark.master.rest.enabled": "false", **service.conf}
    (service.dir / "spark.conf").write_text("".join(f"{k} {v}\n" for k, v in conf.items()))
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_DAEMON_MEMORY": service.memory, **service.env, "JAVA_HOME": str(Path(java).resolve().parent.parent)}
    with open(service.log_file, "ab") as out:
        proc = subprocess.Popen([str(home / "bin" / "spark-class"), *service.arguments], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=service.dir, env=env)
    service.pid_file.write_text(f"{proc.pid}\n")
    return proc


def _wait(ready, started: list[tuple[SparkService, subprocess.Popen]], deadline: float, timed_out) -> None:
    """Poll `ready()` until true; a process started here that exits, or the deadline, fails it
    (`timed_out()` gives that message)."""
    def ready_or_exited() -> bool:
        if ready():
            return True
        for service, proc in started:
            if proc.poll() is not None:
                raise StackError(f"{service.name} exited during start-up; see {service.log_file}:\n"
                                 + tail(service.log_file))
        return False

    poll_until(ready_or_exited, deadline - time.monotonic(), timed_out=lambda: StackError(timed_out()))


def up(services: list[SparkService], python: Path, ui_port: int, timeout_s: float) -> list[SparkService]:
    """Start what is not running; wait until the master counts every worker alive. Returns what it started."""
    home = spark_home(python)
    java = check_java()
    started: list[tuple[SparkService, subprocess.Popen]] = []
    master, workers = services[0], len(services) - 1

    def workers_alive() -> int:
        state = master_state(ui_port)
        return state.get("aliveworkers", 0) if state and state.get("status") == "ALIVE" else 0

    try:
        deadline = time.monotonic() + timeout_s
        for service in services:  # the master first: the workers register with it
            pid = service.pid()
            if pid is not None:
                print(f"spark: {service.name} already running (pid {pid})", flush=True)
            else:
                proc = launch(service, home, java)
                started.append((service, proc))
                print(f"spark: started {service.name} (pid {proc.pid})", flush=True)
            if service is master:
                _wait(lambda: master_state(ui_port) is not None, started, deadline,
                      lambda: f"the Spark master's UI did not answer on port {ui_port} within {timeout_s:.0f}s; "
                              f"see {master.log_file}")
        _wait(lambda: workers_alive() >= workers, started, deadline,
              lambda: f"the Spark master counts {workers_alive()} of {workers} workers alive after {timeout_s:.0f}s; "
                      f"see the logs under {master.state_dir}")
    except BaseException:
        for service, proc in reversed(started):
            stop(service, pid=proc.pid)
        raise
    print(f"spark: up: master spark://127.0.0.1:{master.ports[0]}, {workers} workers, "
          f"UI http://127.0.0.1:{ui_port}", flush=True)
    return [service for service, _ in started]


def connect_up(service: SparkService, python: Path, timeout_s: float) -> bool:
    """Start the Spark Connect server unless it runs; wait until its gRPC port answers. Returns
    whether it started it."""
    pid = service.pid()
    if pid is not None:
        print(f"spark: {service.name} already running (pid {pid})", flush=True)
        return False
    proc = launch(service, spark_home(python), check_java())
    print(f"spark: started {service.name} (pid {proc.pid})", flush=True)
    port = service.ports[0]
    try:
        _wait(lambda: port_open(port), [(service, proc)], time.monotonic() + timeout_s,
              lambda: f"the Spark Connect server did not listen on port {port} within {timeout_s:.0f}s; "
                      f"see {service.log_file}")
        # readiness: a first query and warm Python workers in the jobs' session (kmigrate_spark/session.py)
        prepared = subprocess.run([str(python), str(PROJECT_DIR / "spark_jobs" / "prepare_server.py"),
                                   f"sc://127.0.0.1:{port}"],
                                  capture_output=True, text=True, timeout=timeout_s, cwd=PROJECT_DIR)
        if prepared.returncode != 0:
            raise StackError(f"the Spark Connect server does not run kmigrate's Python tasks:\n"
                             f"{prepared.stdout}{prepared.stderr[-2000:]}\nsee {service.log_file}")
        print(prepared.stdout.strip(), flush=True)
    except BaseException:
        stop(service, pid=proc.pid)
        raise
    print(f"spark: up: Spark Connect server sc://127.0.0.1:{port}, UI http://127.0.0.1:{service.ports[1]}", flush=True)
    return True


def down(services: list[SparkService]) -> None:
    for service in reversed(services):
        if stop(service):
            print(f"spark: stopped {service.name}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down", "status", "connect-up", "connect-down"])
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--python", type=Path, default=DEFAULT_PYTHON, help="the interpreter whose pyspark to run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-cores", type=int, default=1)
    parser.add_argument("--worker-memory", default="1g")
    parser.add_argument("--master-port", type=int, default=MASTER_PORT)
    parser.add_argument("--ui-port", type=int, default=MASTER_UI_PORT, help="master UI; workers take the next ports")
    parser.add_argument("--connect-master", default="local[4,4]",
                        help="where the Spark Connect server runs its tasks (local[N,F]: N slots, F attempts a task)")
    parser.add_argument("--connect-port", type=int, default=CONNECT_PORT)
    parser.add_argument("--connect-ui-port", type=int, default=CONNECT_UI_PORT)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    services = cluster_services(args.state_dir.resolve(), args.workers, args.master_port, args.ui_port,
                                args.worker_cores, args.worker_memory)
    connect = connect_service(args.state_dir.resolve(), args.connect_master, args.connect_port,
                              args.connect_ui_port, args.python.absolute())
    try:
        if args.command == "connect-up":
            connect_up(connect, args.python, args.timeout)
        elif args.command == "connect-down":
            down([connect])
        elif args.command == "up":
            up(services, args.python, args.ui_port, args.timeout)
        elif args.command == "down":
            down(services)
        else:
            state = master_state(args.ui_port)
            print(json.dumps({"services": {s.name: s.pid() for s in [*services, connect]},
                              "master": {k: state.get(k) for k in ("url", "status", "aliveworkers", "cores")}
                              if state else None}, indent=2))
            return 0 if state and state.get("aliveworkers", 0) >= args.workers else 1
    except StackError as exc:
        print(f"spark: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
