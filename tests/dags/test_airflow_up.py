"""`make airflow-up` and `make airflow-down` (stack/local_airflow.py): the UI comes up on the local
stack with the project's DAGs and pool, and down stops exactly the processes up started."""
from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import local_airflow  # on sys.path by tests/support/airflow.py (imported by tests/dags/conftest.py)

from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until

PORT, PROMETHEUS_PORT, EXPORTER_PORT = 30290, 30291, 30292  # this test's own ports (below the ephemeral range)
SCRIPT = PROJECT_DIR / "stack" / "local_airflow.py"


def api(path: str):
    return local_airflow.api(f"http://127.0.0.1:{PORT}", path)


def running(pid: int) -> bool:
    try:
        return b"airflow" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def test_airflow_up_serves_the_project_and_down_stops_what_it_started(stack, tmp_path):
    home = tmp_path / "airflow-ui"
    command = [sys.executable, str(SCRIPT), "--home", str(home), "--port", str(PORT),
               "--prometheus-port", str(PROMETHEUS_PORT), "--exporter-port", str(EXPORTER_PORT)]
    started = subprocess.run([*command[:2], "up", *command[2:]], capture_output=True, text=True, timeout=300)
    pids = json.loads((home / "pids.json").read_text()) if (home / "pids.json").exists() else {}
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"the UI is at http://127.0.0.1:{PORT}" in started.stdout
        # the triggerer runs the deferred tasks' triggers (kafka_dr_mirror's follower); Prometheus and the
        # mirrors' exporter beside them
        assert sorted(pids) == ["api-server", "dag-processor", "monitoring-exporter", "monitoring-prometheus", "scheduler",
                                "triggerer"]
        assert f"Prometheus at http://127.0.0.1:{PROMETHEUS_PORT}" in started.stdout
        targets = json.load(urllib.request.urlopen(f"http://127.0.0.1:{PROMETHEUS_PORT}/api/v1/targets", timeout=10))
        assert [t["scrapeUrl"] for t in targets["data"]["activeTargets"]] in (
            [], [f"http://127.0.0.1:{EXPORTER_PORT}/metrics"])  # listed once its first discovery ran
        with urllib.request.urlopen(f"http://127.0.0.1:{EXPORTER_PORT}/metrics", timeout=10) as resp:
            assert b"# TYPE kmigrate_mirror_lag_records gauge" in resp.read()
        assert all(map(running, pids.values()))
        assert api("/pools/kafka_migration_copy")["slots"] == 2
        wait_until(lambda: {d["dag_id"] for d in api("/dags")["dags"]} >= {
            "kafka_migration", "kafka_dr_drill", "kafka_migration_rollback", "kafka_dr_mirror", "kafka_dr_failover"},
            "the dag-processor to parse the DAGs", 120)
        again = subprocess.run([*command[:2], "up", *command[2:]], capture_output=True, text=True, timeout=60)
        assert "already running" in again.stdout  # idempotent: nothing else started
    finally:
        stopped = subprocess.run([*command[:2], "down", "--home", str(home)], capture_output=True, text=True,
                                 timeout=120)
    assert stopped.returncode == 0 and "stopped api-server" in stopped.stdout, stopped.stdout + stopped.stderr
    assert not any(map(running, pids.values())) and not (home / "pids.json").exists()
