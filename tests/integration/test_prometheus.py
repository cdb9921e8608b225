"""The mirror watched by a real Prometheus (Debian's, from `make install`), on the real stack: the
exporter of the test's state location scraped every second, the project's alert rules loaded (the
heartbeat alert's 60 s and 1 m made 4 s and 2 s, so that it fires within a test; its expression
otherwise as shipped), and the mirror's driver a process of its own, killed like a driver that dies.
Under a live producer the scraped lag is the status file's of the round Prometheus read; stopping
the producer brings it to 0; killing the driver fires the heartbeat alert (read from Prometheus's
alerts API), and a driver started again clears it; every query of the shipped Grafana dashboard
returns data (the mirrors' panels; the runs' are answered in the migration and drill DAG tests). `make
test-metrics` sums what it recorded in one JSON line."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status

from tests.support import results
from tests.support.apps import Writer
from tests.support.kafka import create_topic
from tests.support.monitoring import dashboard_queries, value
from tests.support.mirror import wait_caught_up, wait_for_round
from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until

sys.path.insert(0, str(PROJECT_DIR / "stack"))
import local_prometheus  # noqa: E402

METRICS_RESULTS_ENV = "KMIGRATE_METRICS_RESULTS"
PORT, EXPORTER_PORT = 17190, 17568  # this test's own, beside make airflow-up's
PARTITIONS = 3
STALE_S = 4


def fast_rules(path: Path) -> Path:
    """The shipped rules with the heartbeat alert's threshold and duration made short."""
    rules = yaml.safe_load((PROJECT_DIR / "monitoring" / "alerts.yml").read_text())
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule["alert"] == "KmigrateMirrorHeartbeatStale":
                assert "> 60" in rule["expr"], rule
                rule["expr"] = rule["expr"].replace("> 60", f"> {STALE_S}")
                rule["for"] = "2s"
    path.write_text(yaml.safe_dump(rules))
    return path


def start_driver(stack, state: Path, run: str, pattern: str, log: Path) -> subprocess.Popen:  # noqa: ANN001
    with log.open("a") as out:
        return subprocess.Popen([sys.executable, "-m", "tests.support.mirror_driver", str(state), run,
                                 stack.source.bootstrap_servers, stack.target.bootstrap_servers, pattern],
                                stdout=out, stderr=subprocess.STDOUT, cwd=PROJECT_DIR, start_new_session=True)


def firing(url: str, name: str, run: str) -> bool:
    return any(a["labels"].get("alertname") == name and a["labels"].get("run") == run and a["state"] == "firing"
               for a in local_prometheus.alerts(url))


def test_a_real_prometheus_scrapes_the_mirror_tracks_its_lag_and_alerts_on_a_dead_driver(stack, unique_name, tmp_path):
    topic = f"{unique_name}.orders"
    create_topic(stack.source, topic, PARTITIONS)
    state, run = tmp_path / "state", "watched"
    state.mkdir()
    manifest = Manifest(str(state), run)
    monitoring = local_prometheus.Monitoring(tmp_path / "prometheus", str(state), port=PORT, exporter_port=EXPORTER_PORT,
                                             scrape_s=1.0, rules=[fast_rules(tmp_path / "rules.yml")]).start()
    url, r = monitoring.url, f'run="{run}"'
    writer = Writer(stack.source, topic, PARTITIONS)
    drivers: list[subprocess.Popen] = []
    facts: dict = {}
    try:
        drivers.append(start_driver(stack, state, run, re.escape(topic), tmp_path / "driver.log"))
        wait_for_round(manifest, 1, timeout_s=120)
        facts["scraped"] = bool(wait_until(lambda: value(url, f"kmigrate_mirror_status_round{{{r}}}"),
                                           "Prometheus to hold a scrape of the mirror", 60))
        writer.start()
        wait_until(lambda: writer.sent >= 2000, "the producer writing", 60)
        # the lag Prometheus holds is the one of the status round it read: each round's, as the file had it
        seen: dict[int, int] = {}
        tracked = 0
        deadline = time.monotonic() + 30
        while tracked < 5 and time.monotonic() < deadline:
            status = mirror_status.read(manifest)
            seen[status["round"]] = status["behind_records"]
            at = value(url, f"kmigrate_mirror_status_round{{{r}}}")
            lag = value(url, f"kmigrate_mirror_lag_records{{{r}}}")
            status = mirror_status.read(manifest)
            seen[status["round"]] = status["behind_records"]
            if at is not None and int(at) in seen and value(url, f"kmigrate_mirror_status_round{{{r}}}") == at:
                assert lag == seen[int(at)], (at, lag, seen[int(at)])
                tracked += 1
            time.sleep(0.3)  # between two samples of a changing value (a pace, not a wait for a condition)
        facts["lag_tracks"] = tracked >= 5
        assert facts["lag_tracks"], f"only {tracked} samples of a round seen in both the file and Prometheus"
        writer.stop()
        wait_caught_up(manifest, stack.source, {topic: PARTITIONS}, timeout_s=120)
        wait_until(lambda: value(url, f"kmigrate_mirror_lag_records{{{r}}}") == 0, "the scraped lag at 0", 30)
        assert not firing(url, "KmigrateMirrorHeartbeatStale", run)

        os.killpg(drivers[-1].pid, signal.SIGKILL)  # the driver dies: its status stays as it was, not stopped
        drivers[-1].wait(30)
        facts["alert_fired"] = bool(wait_until(lambda: firing(url, "KmigrateMirrorHeartbeatStale", run),
                                               "the heartbeat alert firing", 60))
        drivers.append(start_driver(stack, state, run, re.escape(topic), tmp_path / "driver.log"))
        facts["alert_cleared"] = bool(wait_until(lambda: not any(
            a["labels"].get("alertname") == "KmigrateMirrorHeartbeatStale" and a["labels"].get("run") == run
            for a in local_prometheus.alerts(url)), "the heartbeat alert resolved by a driver started again", 60))

        queries = dashboard_queries("run", run)  # the mirrors' panels (the runs' are answered in the DAG tests)
        wait_until(lambda: value(url, f"rate(kmigrate_mirror_offsets_mirrored_total{{{r}}}[1m])") is not None,
                   "a minute's rate to have two samples", 30)
        answered = [q for q in queries if local_prometheus.query(url, q)]
        facts.update(dashboard_queries=len(queries), dashboard_queries_with_data=len(answered))
        assert answered == queries, sorted(set(queries) - set(answered))
    finally:
        writer.stop()
        for driver in drivers:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
                driver.wait(30)
        monitoring.stop()
        results.record(METRICS_RESULTS_ENV, **{k: facts.get(k) for k in
                                               ("scraped", "lag_tracks", "alert_fired", "alert_cleared",
                                                "dashboard_queries", "dashboard_queries_with_data")})


@pytest.fixture(autouse=True)
def _prometheus_installed() -> None:
    binary = local_prometheus.prometheus_home() / "usr" / "bin" / "prometheus"
    assert binary.exists(), f"{binary} is missing: make install unpacks Debian's Prometheus there"
