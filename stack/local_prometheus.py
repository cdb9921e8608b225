"""A Prometheus server beside the local stack, scraping kmigrate's exporter of a state location
(`python -m kmigrate.run.report.metrics`) with the project's alert rules loaded: the server from Debian's
package that `make install` unpacks (stack/prometheus_install.py). `make airflow-up` starts both for
the runs of its Airflow, a test starts its own on its own ports. Each is a process of its own
session, stopped by the pid this module recorded. Standard library only, like stack.py."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prometheus_install import home as prometheus_home
from stack_common import PROJECT_DIR, poll_until

PORT = 17090  # the Prometheus UI of make airflow-up
EXPORTER_PORT = 17468
RULES = PROJECT_DIR / "monitoring" / "alerts.yml"


def config(exporter: str, rules: Sequence[Path], scrape_s: float) -> dict[str, Any]:
    """The server's configuration (JSON is YAML): the exporter scraped every `scrape_s`, the rules
    evaluated as often."""
    interval = f"{max(1, round(scrape_s * 1000))}ms"
    return {"global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": [str(r) for r in rules],
            "scrape_configs": [{"job_name": "kmigrate", "static_configs": [{"targets": [exporter]}]}]}


class Monitoring:
    """The exporter of `state_location` on `exporter_port` and a Prometheus server on `port` scraping it,
    its data and logs under `home`."""

    def __init__(self, home: Path, state_location: str, *, port: int = PORT, exporter_port: int = EXPORTER_PORT,
                 scrape_s: float = 15.0, rules: Sequence[Path] = (RULES,)) -> None:
        self.home, self.state_location = home, state_location
        self.port, self.exporter_port, self.scrape_s, self.rules = port, exporter_port, scrape_s, list(rules)
        self.url = f"http://127.0.0.1:{port}"
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, timeout_s: float = 60.0) -> Monitoring:
        self.home.mkdir(parents=True, exist_ok=True)
        config_file = self.home / "prometheus.yml"
        config_file.write_text(json.dumps(config(f"127.0.0.1:{self.exporter_port}", self.rules, self.scrape_s), indent=2))
        commands = {
            "exporter": [sys.executable, "-m", "kmigrate.run.report.metrics", "--state-location", self.state_location,
                         "--port", str(self.exporter_port)],
            "prometheus": [str(prometheus_home() / "usr" / "bin" / "prometheus"), f"--config.file={config_file}",
                           f"--storage.tsdb.path={self.home / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
                           "--web.enable-lifecycle"],
        }
        for name, command in commands.items():
            log = open(self.home / f"{name}.log", "ab")  # noqa: SIM115 - the process keeps it
            self.processes[name] = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=self.home,
                                                    start_new_session=True)
        try:
            poll_until(self.ready, timeout_s, interval_s=0.2, timed_out=lambda: TimeoutError(
                f"Prometheus at {self.url} not ready after {timeout_s:.0f}s; see the logs in {self.home}"))
        except BaseException:
            self.stop()
            raise
        return self

    def ready(self) -> bool:
        dead = [name for name, proc in self.processes.items() if proc.poll() is not None]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited; see {self.home}/<name>.log")
        try:  # both answer: Prometheus ready, the exporter serving
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
                ready = resp.status == 200
            with urllib.request.urlopen(f"http://127.0.0.1:{self.exporter_port}/metrics", timeout=5) as resp:
                return ready and resp.status == 200
        except OSError:
            return False

    def pids(self) -> dict[str, int]:
        return {name: proc.pid for name, proc in self.processes.items()}

    def stop(self) -> None:
        stop_pids(self.pids())
        for proc in self.processes.values():
            proc.wait(30)


def stop_pids(pids: dict[str, int], timeout_s: float = 20.0) -> None:
    """Stop the process groups of `pids` (their sessions): TERM, then KILL what is left."""
    for pid in pids.values():
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout_s
    for pid in pids.values():
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def query(url: str, expr: str) -> list[dict[str, Any]]:
    """The instant vector (or scalar) of PromQL `expr` now: [{"metric": labels, "value": [at, "v"]}]."""
    with urllib.request.urlopen(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=10) as resp:
        body = json.load(resp)
    if body["status"] != "success":
        raise RuntimeError(f"query {expr!r}: {body}")
    result = body["data"]["result"]
    return result if body["data"]["resultType"] == "vector" else [{"metric": {}, "value": result}]


def alerts(url: str) -> list[dict[str, Any]]:
    """The alerts the server holds now, each with its labels and state (pending, firing)."""
    with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=10) as resp:
        return json.load(resp)["data"]["alerts"]
