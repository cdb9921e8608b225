"""The Spark copy job through a real `spark-submit --master local[2]` against the local stack."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kmigrate.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.plan import build_plan, write_clients
from kmigrate.topics import prepare_target_topic
from tests.conftest import PROJECT_DIR
from tests.integration.test_copier import assert_same_partition, seed_plain

SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")


def spark_copy(state: Path, run_id: str, clients: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    return subprocess.run(
        [SPARK_SUBMIT, "--master", "local[2]", "--conf", "spark.ui.enabled=false",
         str(PROJECT_DIR / "spark_jobs" / "copy_partitions.py"),
         "--state-location", str(state), "--run-id", run_id, "--clients", str(clients)],
        capture_output=True, text=True, timeout=300, env=env, cwd=PROJECT_DIR)


def test_spark_job_copies_every_partition_and_a_rerun_is_a_noop(stack, unique_name, tmp_path):
    topics = [f"{unique_name}-{i}" for i in range(3)]
    for topic in topics:
        seed_plain(stack.source, topic, partitions=4, per_partition=500)
        with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
            prepare_target_topic(source, target, topic)
    manifest = Manifest(str(tmp_path / "state"), "run-1")
    manifest.write_once("plan", build_plan(stack.source, topics))
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)

    first = spark_copy(tmp_path / "state", "run-1", clients)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "12 partitions copied" in first.stdout
    rows = manifest.read(sorted(p for p in manifest.parts() if p.startswith("copy-results/"))[0])["rows"]
    assert len(rows) == 12 and all(r["ok"] and r["digests_equal"] and r["records"] == 500 for r in rows)
    for topic in topics:
        for partition in range(4):
            assert_same_partition(stack, topic, partition)

    again = spark_copy(tmp_path / "state", "run-1", clients)
    assert again.returncode == 0, again.stderr[-3000:]
    attempts = sorted(p for p in manifest.parts() if p.startswith("copy-results/"))
    assert len(attempts) == 2
    rerun_rows = [r for a in attempts for r in manifest.read(a)["rows"] if r["records"] == 0]
    assert len(rerun_rows) == 12 and all(r["digests_equal"] for r in rerun_rows)


def test_spark_job_refuses_a_client_file_others_can_read(tmp_path, stack):
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    clients.chmod(0o644)
    Manifest(str(tmp_path / "state"), "run-1").write_once("plan", {"units": []})
    result = spark_copy(tmp_path / "state", "run-1", clients)
    output = result.stdout + result.stderr  # spark-submit merges the Python driver's stderr into stdout
    assert result.returncode == 2
    assert "readable by others" in output and "chmod 600" in output


def test_spark_job_without_a_plan_says_what_to_do(tmp_path, stack):
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    result = spark_copy(tmp_path / "state", "run-1", clients)
    assert result.returncode == 2
    assert "has no plan; run the snapshot step first" in result.stdout + result.stderr
