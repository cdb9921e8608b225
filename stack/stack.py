#!/usr/bin/env python3
"""Start, stop and inspect the local Kafka stack: two KRaft clusters, each with a Connect worker.

Standard library only, so it runs before the project's virtualenv exists. Every failure the
user can fix (a taken port, no java, Maven Central out of reach) ends in one line naming the
problem and the way out, exit status 2.

    python3 stack/stack.py install      # resolve the pinned Kafka jars into .cache/ (offline once cached)
    python3 stack/stack.py up           # start what is not running, wait until each service answers
    python3 stack/stack.py status
    python3 stack/stack.py down [--wipe]
    python3 stack/stack.py run -- CMD    # up, run CMD, stop only what this call started
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parent.parent
POM = PROJECT_DIR / "stack" / "pom.xml"
KAFKA_VERSION = "4.3.1"
CACHE_DIR = Path(os.environ.get("KMIGRATE_CACHE_DIR", PROJECT_DIR / ".cache"))
KAFKA_HOME = CACHE_DIR / f"kafka-{KAFKA_VERSION}"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
DEFAULT_STATE_DIR = PROJECT_DIR / ".stack"

# Broker settings shared by every local cluster; docker-compose.yaml carries the same values
# (tests/test_compose.py compares them).
BROKER_SETTINGS: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "inter.broker.listener.name": "PLAINTEXT",
    "num.partitions": "1",
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "log.cleaner.backoff.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "4",
}

CONNECT_SETTINGS: dict[str, str] = {
    "config.storage.topic": "_connect-configs",
    "offset.storage.topic": "_connect-offsets",
    "status.storage.topic": "_connect-status",
    "key.converter": "org.apache.kafka.connect.storage.StringConverter",
    "value.converter": "org.apache.kafka.connect.storage.StringConverter",
    "config.storage.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "offset.flush.interval.ms": "1000",
}

BROKER_HEAP = "-Xms128m -Xmx512m"
CONNECT_HEAP = "-Xms128m -Xmx512m"
JVM_FLAGS = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"


class StackError(Exception):
    """A problem the user can fix; its message names it and the way out."""


@dataclasses.dataclass(frozen=True)
class Cluster:
    name: str
    kafka_port: int
    controller_port: int
    connect_port: int

    @property
    def bootstrap(self) -> str:
        return f"localhost:{self.kafka_port}"

    @property
    def connect_url(self) -> str:
        return f"http://localhost:{self.connect_port}"


DEFAULT_CLUSTERS = (
    Cluster("source", 19092, 19093, 18083),
    Cluster("target", 29092, 29093, 28083),
)


def parse_cluster(text: str) -> Cluster:
    """NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT, e.g. source:19092:19093:18083."""
    try:
        name, kafka_port, controller_port, connect_port = text.split(":")
        return Cluster(name, int(kafka_port), int(controller_port), int(connect_port))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--cluster {text!r}: expected NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT"
        ) from None


# --------------------------------------------------------------------------- install


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise StackError(
            "java not found: install a Java 17+ runtime (Debian: apt-get install openjdk-17-jre-headless) "
            "or set JAVA_HOME"
        )
    return found


def check_java() -> str:
    java = java_binary()
    out = subprocess.run([java, "-version"], capture_output=True, text=True)
    text = out.stderr + out.stdout
    try:
        quoted = text.split('"')[1]
        major = int(quoted.split(".")[0])
    except (IndexError, ValueError):
        raise StackError(f"{java} -version printed no version; install a Java 17+ runtime or set JAVA_HOME") from None
    if major < 17:
        raise StackError(f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs Java 17+: install one or set JAVA_HOME")
    return java


def maven_settings_args(workdir: Path) -> list[str]:
    """KMIGRATE_MAVEN_MIRROR (a repository URL) replaces Maven Central, e.g. a company mirror."""
    mirror = os.environ.get("KMIGRATE_MAVEN_MIRROR")
    if not mirror:
        return []
    settings = workdir / "maven-settings.xml"
    settings.write_text(
        "<settings><mirrors><mirror><id>kmigrate-mirror</id><mirrorOf>*</mirrorOf>"
        f"<url>{mirror}</url></mirror></mirrors></settings>\n"
    )
    return ["-s", str(settings)]


def installed_marker(home: Path = KAFKA_HOME) -> Path:
    return home / ".complete"


def install(home: Path = KAFKA_HOME) -> Path:
    """Resolve the broker, Connect runtime and plugins into `home`; a no-op once complete."""
    if installed_marker(home).exists():
        return home
    check_java()
    mvn = shutil.which("mvn")
    if not mvn:
        raise StackError("mvn not found: install Apache Maven (Debian: apt-get install maven)")
    repo = CACHE_DIR / "m2"
    partial = home.with_name(home.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    print(f"stack: resolving Apache Kafka {KAFKA_VERSION} from Maven Central into {home} ...", flush=True)
    base = [mvn, "-B", "-q", "-f", str(POM), f"-Dmaven.repo.local={repo}", *maven_settings_args(partial)]
    steps = [
        [*base, f"{DEPENDENCY_PLUGIN}:copy-dependencies", "-DincludeScope=runtime", f"-DoutputDirectory={partial / 'libs'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-file:{KAFKA_VERSION}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-file'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-mirror:{KAFKA_VERSION}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-mirror'}"],
        [*base, f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact=org.apache.kafka:connect-mirror-client:{KAFKA_VERSION}",
         f"-DoutputDirectory={partial / 'plugins' / 'connect-mirror'}"],
    ]
    for step in steps:
        result = subprocess.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            log = partial.with_name("mvn-error.log")
            log.write_text(result.stdout + result.stderr)
            detail = next((ln for ln in (result.stdout + result.stderr).splitlines() if "[ERROR]" in ln), "")
            unreachable = any(
                s in result.stdout + result.stderr
                for s in ("Could not transfer", "Unknown host", "Connection refused", "connect timed out",
                          "Network is unreachable", "Could not resolve")
            )
            if unreachable:
                raise StackError(
                    "Maven Central is unreachable, so the Kafka jars cannot be downloaded: check the network "
                    "or set KMIGRATE_MAVEN_MIRROR to a reachable mirror, then run again "
                    f"(mvn output in {log})"
                )
            raise StackError(f"mvn failed resolving Kafka {KAFKA_VERSION}: {detail.strip()} (full output in {log})")
    shutil.rmtree(home, ignore_errors=True)
    partial.rename(home)
    installed_marker(home).write_text(KAFKA_VERSION + "\n")
    return home


# --------------------------------------------------------------------------- services


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def kafka_answers(port: int) -> bool:
    """True when the broker answers an ApiVersions request (v0) on `port`."""
    client_id = b"kmigrate-stack"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            header = sock.recv(4)
            if len(header) < 4:
                return False
            (size,) = struct.unpack(">i", header)
            payload = b""
            while len(payload) < min(size, 6):
                chunk = sock.recv(size - len(payload))
                if not chunk:
                    return False
                payload += chunk
            correlation_id, error_code = struct.unpack(">ih", payload[:6])
            return correlation_id == 7 and error_code == 0
    except OSError:
        return False


def connect_answers(port: int) -> bool:
    """True when the Connect worker's REST API lists connectors (the herder has started)."""
    try:
        with urllib.request.urlopen(f"http://localhost:{port}/connectors", timeout=3) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


@dataclasses.dataclass
class Service:
    name: str
    kind: str  # "kafka" or "connect"
    cluster: Cluster
    state_dir: Path

    @property
    def dir(self) -> Path:
        return self.state_dir / self.name

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    @property
    def port(self) -> int:
        return self.cluster.kafka_port if self.kind == "kafka" else self.cluster.connect_port

    @property
    def ports(self) -> list[int]:
        if self.kind == "kafka":
            return [self.cluster.kafka_port, self.cluster.controller_port]
        return [self.cluster.connect_port]

    @property
    def log_file(self) -> Path:
        return self.dir / "logs" / "server.log"

    def answers(self) -> bool:
        return kafka_answers(self.port) if self.kind == "kafka" else connect_answers(self.port)

    def pid(self) -> int | None:
        return running_pid(self.pid_file, self.dir)


def running_pid(pid_file: Path, service_dir: Path) -> int | None:
    """The pid in `pid_file` if that process is running and is ours, else None; a stale pid file
    is removed."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if process_is_ours(pid, service_dir):
        return pid
    pid_file.unlink(missing_ok=True)
    return None


def process_is_ours(pid: int, service_dir: Path, settle_s: float = 1.0) -> bool:
    """The pid is alive and its command line names this service's directory (not a reused pid).

    /proc/<pid>/cmdline can read empty or stale while a process execs or exits, so a
    mismatch on a live pid is re-read for up to `settle_s` before it counts."""
    deadline = time.monotonic() + settle_s
    while True:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return False  # no such process
        if "\nState:\tZ" in status:
            return False
        if str(service_dir) in cmdline:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def services(clusters: tuple[Cluster, ...], state_dir: Path) -> list[Service]:
    brokers = [Service(f"{c.name}-kafka", "kafka", c, state_dir) for c in clusters]
    workers = [Service(f"{c.name}-connect", "connect", c, state_dir) for c in clusters]
    return brokers + workers


def write_properties(path: Path, settings: dict[str, str]) -> None:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))


def write_log4j(service: Service) -> Path:
    path = service.dir / "log4j2.properties"
    logs = service.dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "status = warn\n"
        "appender.file.type = RollingFile\n"
        "appender.file.name = file\n"
        f"appender.file.fileName = {logs / 'server.log'}\n"
        f"appender.file.filePattern = {logs / 'server.log.%i'}\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = [%d] %p %m (%c)%n\n"
        "appender.file.policies.type = Policies\n"
        "appender.file.policies.size.type = SizeBasedTriggeringPolicy\n"
        "appender.file.policies.size.size = 50MB\n"
        "appender.file.strategy.type = DefaultRolloverStrategy\n"
        "appender.file.strategy.max = 3\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.file.ref = file\n"
        "logger.reflections.name = org.reflections\n"
        "logger.reflections.level = ERROR\n"
    )
    return path


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64. Like Kafka's own, never one that begins
    with '-', which kafka-storage's argument parser would take for an option."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def java_command(java: str, service: Service, heap: str, main_class: str, *args: str) -> list[str]:
    log4j = write_log4j(service)
    classpath = str(KAFKA_HOME / "libs" / "*")
    return [
        java, *heap.split(), *JVM_FLAGS.split(),
        f"-Dlog4j2.configurationFile={log4j}",
        f"-Dkafka.logs.dir={service.dir / 'logs'}",
        f"-Dkmigrate.service.dir={service.dir}",  # lets pid checks recognise our process
        "-cp", classpath, main_class, *args,
    ]


def prepare_kafka(java: str, service: Service) -> list[str]:
    cluster = service.cluster
    data_dir = service.dir / "data"
    props = service.dir / "server.properties"
    settings = {
        **BROKER_SETTINGS,
        "controller.quorum.voters": f"1@localhost:{cluster.controller_port}",
        "listeners": f"PLAINTEXT://localhost:{cluster.kafka_port},CONTROLLER://localhost:{cluster.controller_port}",
        "advertised.listeners": f"PLAINTEXT://localhost:{cluster.kafka_port}",
        "log.dirs": str(data_dir),
    }
    write_properties(props, settings)
    if not (data_dir / "meta.properties").exists():
        cluster_id_file = service.dir / "cluster.id"
        if not cluster_id_file.exists():
            cluster_id_file.write_text(new_cluster_id())
        fmt = java_command(java, service, "-Xmx256m", "kafka.tools.StorageTool",
                           "format", f"--cluster-id={cluster_id_file.read_text().strip()}", "-c", str(props))
        result = subprocess.run(fmt, capture_output=True, text=True)
        if result.returncode != 0:
            raise StackError(f"{service.name}: formatting {data_dir} failed: {(result.stderr or result.stdout).strip()}")
    return java_command(java, service, BROKER_HEAP, "kafka.Kafka", str(props))


def prepare_connect(java: str, service: Service) -> list[str]:
    cluster = service.cluster
    props = service.dir / "connect-distributed.properties"
    settings = {
        "bootstrap.servers": cluster.bootstrap,
        "group.id": f"kmigrate-{cluster.name}-connect",
        **CONNECT_SETTINGS,
        "listeners": f"http://localhost:{cluster.connect_port}",
        "rest.advertised.host.name": "localhost",
        "rest.advertised.port": str(cluster.connect_port),
        "plugin.path": str(KAFKA_HOME / "plugins"),
    }
    write_properties(props, settings)
    return java_command(java, service, CONNECT_HEAP, "org.apache.kafka.connect.cli.ConnectDistributed", str(props))


def launch(java: str, service: Service) -> subprocess.Popen:
    service.dir.mkdir(parents=True, exist_ok=True)
    for port in service.ports:
        if port_open(port):
            raise StackError(
                f"{service.name}: port {port} is already taken by another process; stop it "
                f"(e.g. `ss -ltnp 'sport = :{port}'` shows which) or free the port, then run `make stack-up` again"
            )
    command = prepare_kafka(java, service) if service.kind == "kafka" else prepare_connect(java, service)
    with open(service.dir / "stdout.log", "ab") as out:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=service.dir)
    service.pid_file.write_text(f"{proc.pid}\n")
    return proc


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_until_answering(pending: list[Service], launched: dict[str, subprocess.Popen], timeout_s: float) -> None:
    """Wait until every service in `pending` answers; one that exits meanwhile fails the wait.
    Liveness of a process launched by this call comes from its Popen handle."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pending)
    while waiting:
        for service in list(waiting):
            if service.answers():
                print(f"stack: {service.name} answers on localhost:{service.port}", flush=True)
                waiting.remove(service)
            elif (launched[service.name].poll() is not None if service.name in launched
                  else service.pid() is None):
                raise StackError(
                    f"{service.name} exited during start-up; see {service.dir / 'stdout.log'} and {service.log_file}:\n"
                    + tail(service.log_file if service.log_file.exists() else service.dir / "stdout.log")
                )
        if waiting and time.monotonic() > deadline:
            names = ", ".join(s.name for s in waiting)
            raise StackError(f"{names} did not answer within {timeout_s:.0f}s; see logs under {waiting[0].state_dir}")
        if waiting:
            time.sleep(0.5)


def up(clusters: tuple[Cluster, ...], state_dir: Path, timeout_s: float) -> list[Service]:
    """Start every service that is not running and wait until all answer; returns those it started."""
    if not installed_marker().exists():
        install()
    java = check_java()
    all_services = services(clusters, state_dir)
    started: list[Service] = []
    launched: dict[str, subprocess.Popen] = {}
    try:
        for kind in ("kafka", "connect"):
            group = [s for s in all_services if s.kind == kind]
            to_wait = []
            for service in group:
                pid = service.pid()
                if pid is not None:
                    print(f"stack: {service.name} already running (pid {pid})", flush=True)
                    if not service.answers():
                        to_wait.append(service)
                    continue
                launched[service.name] = launch(java, service)
                started.append(service)
                to_wait.append(service)
                print(f"stack: started {service.name} (pid {launched[service.name].pid}), "
                      f"waiting for localhost:{service.port} ...", flush=True)
            wait_until_answering(to_wait, launched, timeout_s)
    except BaseException:
        for service in reversed(started):
            stop(service, pid=launched[service.name].pid)
        raise
    print(f"stack: up ({', '.join(f'{c.name}: kafka {c.bootstrap}, connect {c.connect_url}' for c in clusters)})")
    return started


def run_with_stack(clusters: tuple[Cluster, ...], state_dir: Path, timeout_s: float, command: list[str]) -> int:
    """Bring the stack up, run `command`, then stop only the services this call started."""
    if not command:
        raise StackError("run needs a command after --, e.g. stack.py run -- pytest")
    started_at = time.monotonic()
    started = up(clusters, state_dir, timeout_s)
    print(f"stack: ready after {time.monotonic() - started_at:.1f}s; running {' '.join(command)}", flush=True)
    try:
        return subprocess.call(command)
    finally:
        for service in reversed(started):
            if stop(service):
                print(f"stack: stopped {service.name}", flush=True)


def stop(service: Service, timeout_s: float = 30.0, pid: int | None = None) -> bool:
    """SIGTERM the service's process group, SIGKILL after `timeout_s`; wait until it is gone.
    `pid`: a process this program launched itself (its group is ours whatever /proc says)."""
    pid = pid if pid is not None else service.pid()
    if pid is None:
        return False
    try:
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while Path(f"/proc/{pid}").exists() and "\nState:\tZ" not in _status(pid):
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                deadline = time.monotonic() + 10
            time.sleep(0.2)
    except ProcessLookupError:
        pass
    service.pid_file.unlink(missing_ok=True)
    return True


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "\nState:\tZ"


def down(clusters: tuple[Cluster, ...], state_dir: Path, wipe: bool) -> None:
    for service in reversed(services(clusters, state_dir)):  # workers before their brokers
        if stop(service):
            print(f"stack: stopped {service.name}", flush=True)
    if wipe:
        for service in services(clusters, state_dir):
            shutil.rmtree(service.dir, ignore_errors=True)
        print(f"stack: wiped data under {state_dir}")


def status(clusters: tuple[Cluster, ...], state_dir: Path) -> bool:
    report = {}
    for service in services(clusters, state_dir):
        report[service.name] = {"pid": service.pid(), "port": service.port, "answers": service.answers()}
    print(json.dumps(report, indent=2))
    return all(v["answers"] for v in report.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     usage="stack.py {install,up,down,status,run} [options] [-- COMMAND ...]")
    parser.add_argument("command", choices=["install", "up", "down", "status", "run"])
    parser.add_argument("--state-dir", type=Path, default=Path(os.environ.get("KMIGRATE_STACK_DIR", DEFAULT_STATE_DIR)),
                        help="where configs, data, logs and pid files live (default: .stack/)")
    parser.add_argument("--cluster", type=parse_cluster, action="append", dest="clusters",
                        help="NAME:KAFKA_PORT:CONTROLLER_PORT:CONNECT_PORT; repeatable (default: source and target)")
    parser.add_argument("--wipe", action="store_true", help="with down: delete data and logs too")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each group of services")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    clusters = tuple(args.clusters or DEFAULT_CLUSTERS)
    state_dir = args.state_dir.resolve()
    try:
        if args.command == "install":
            print(f"stack: Kafka {KAFKA_VERSION} jars in {install()}")
        elif args.command == "up":
            up(clusters, state_dir, args.timeout)
        elif args.command == "run":
            return run_with_stack(clusters, state_dir, args.timeout, command)
        elif args.command == "down":
            down(clusters, state_dir, args.wipe)
        else:
            return 0 if status(clusters, state_dir) else 1
    except StackError as exc:
        print(f"stack: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
