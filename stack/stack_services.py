"""The one kind of process the local stack runs, a Service (a ZooKeeper, a broker that is also a
KRaft controller, a Connect worker): started with the command stack_settings.py writes for it,
tracked by pid, polled until it answers, stopped by process group. Standard library only."""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import os
import signal
import socket
import ssl
import struct
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from stack_common import StackError, poll_until
from stack_profiles import Cluster, broker_name
from stack_security import Security


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def kafka_answers(port: int, context: ssl.SSLContext | None = None) -> bool:
    """True when the broker answers an ApiVersions request (v0) on `port` (over TLS with `context`:
    a SASL_SSL listener answers ApiVersions before authentication)."""
    client_id = b"kmigrate-stack"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as plain, \
                (context.wrap_socket(plain, server_hostname="localhost") if context else plain) as sock:
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


def connect_answers(port: int, security: Security | None = None) -> bool:
    """True when the Connect worker's REST API lists connectors (the herder has started)."""
    request = urllib.request.Request(f"{'https' if security else 'http'}://localhost:{port}/connectors")
    if security:
        user, password = security.connect_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=3,
                                    context=security.ssl_context() if security else None) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False


class PidTracked:
    """A process of the stack's own, in its folder <state_dir>/<name>/, tracked by the pid file there
    (the Kafka services here, the Spark ones of spark_cluster.py)."""

    name: str
    state_dir: Path

    @property
    def dir(self) -> Path:
        return self.state_dir / self.name

    @property
    def pid_file(self) -> Path:
        return self.dir / "pid"

    def pid(self) -> int | None:
        return running_pid(self.pid_file, self.dir)


@dataclasses.dataclass
class Service(PidTracked):
    name: str
    kind: str  # "zookeeper", "kafka" or "connect"
    cluster: Cluster
    state_dir: Path
    security: Security | None = None
    node: int = 1  # a broker's KRaft node id

    @property
    def port(self) -> int:
        if self.kind == "zookeeper":
            return self.cluster.controller_port
        return self.cluster.broker_port(self.node) if self.kind == "kafka" else self.cluster.connect_port

    @property
    def ports(self) -> list[int]:
        if self.kind == "kafka" and not self.cluster.zookeeper:
            extra = [self.cluster.kafka_port + 2] if self.security else []
            return [self.port, self.cluster.controller_port_of(self.node), *extra]
        return [self.port]

    @property
    def log_file(self) -> Path:
        return self.dir / "logs" / "server.log"

    def answers(self) -> bool:
        if self.kind == "zookeeper":
            return port_open(self.port)
        if self.kind == "kafka":
            return kafka_answers(self.port, self.security.ssl_context() if self.security else None)
        return connect_answers(self.port, self.security)


def services(clusters: tuple[Cluster, ...], state_dir: Path, security: Security | None = None) -> list[Service]:
    """The services of `clusters`, in the order they start: ZooKeeper ensembles, brokers, Connect workers."""
    ensembles = [Service(f"{c.name}-zookeeper", "zookeeper", c, state_dir) for c in clusters if c.zookeeper]
    brokers = [Service(broker_name(c, n), "kafka", c, state_dir, security, n) for c in clusters for n in c.nodes]
    workers = [Service(f"{c.name}-connect", "connect", c, state_dir, security) for c in clusters]
    return ensembles + brokers + workers


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
    def verdict() -> str | None:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return "gone"  # no such process
        if "\nState:\tZ" in status:
            return "gone"
        return "ours" if str(service_dir) in cmdline else None

    return poll_until(verdict, settle_s, interval_s=0.05) == "ours"


def start(service: Service, prepare: Callable[[], list[str]]) -> subprocess.Popen:
    """Start `service` in its own process group with the command `prepare()` writes (its configuration,
    once its ports are known to be free), and record its pid."""
    service.dir.mkdir(parents=True, exist_ok=True)
    service.dir.chmod(0o700)
    for port in service.ports:
        if port_open(port):
            raise StackError(
                f"{service.name}: port {port} is already taken by another process; stop it "
                f"(e.g. `ss -ltnp 'sport = :{port}'` shows which) or free the port, then run `make stack-up` again"
            )
    command = prepare()
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
    waiting = list(pending)

    def all_answer() -> bool:
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
        return not waiting

    poll_until(all_answer, timeout_s, timed_out=lambda: StackError(
        f"{', '.join(s.name for s in waiting)} did not answer within {timeout_s:.0f}s; "
        f"see logs under {waiting[0].state_dir}"))


def stop(service: Service, timeout_s: float = 30.0, pid: int | None = None) -> bool:
    """SIGTERM the service's process group, SIGKILL after `timeout_s`; wait until it is gone.
    `pid`: a process this program launched itself (its group is ours whatever /proc says)."""
    pid = pid if pid is not None else service.pid()
    if pid is None:
        return False
    _terminate([pid], timeout_s)
    service.pid_file.unlink(missing_ok=True)
    return True


def stop_all(services_: list[Service], timeout_s: float = 30.0) -> list[Service]:
    """Stop services together: workers first (in parallel), then every broker at once, so that a
    cluster's brokers do not each wait for controllers that are already gone, then ZooKeeper.
    Returns those stopped."""
    stopped = []
    for kind in ("connect", "kafka", "zookeeper"):
        group = [(s, s.pid()) for s in services_ if s.kind == kind]
        group = [(s, pid) for s, pid in group if pid is not None]
        _terminate([pid for _, pid in group], timeout_s)
        for service, _ in group:
            service.pid_file.unlink(missing_ok=True)
            stopped.append(service)
    return stopped


def _terminate(pids: list[int], timeout_s: float) -> None:
    """SIGTERM each process group, SIGKILL those still there after `timeout_s` (again every 10 s);
    wait until every one is gone."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    alive = list(pids)

    def all_gone() -> bool:
        alive[:] = [pid for pid in alive if Path(f"/proc/{pid}").exists() and "\nState:\tZ" not in _status(pid)]
        return not alive

    while not poll_until(all_gone, timeout_s, interval_s=0.1):
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        timeout_s = 10


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "\nState:\tZ"
