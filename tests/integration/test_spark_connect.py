"""The Spark copy and verify jobs as plain Python clients of a running Spark Connect server (started
from the pinned pyspark by stack/spark_cluster.py, on this module's own ports), against the local
Kafka stack: no JVM in the job's process, the server's executors run the copier."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.kafka import seed_plain
from tests.support.kill_hook import kill_hook_env
from tests.support.migration import assert_same_partition
from tests.support.spark import attempts, make_run, seed_workload
from tests.support.stack import PROJECT_DIR, load_spark_cluster_module

# this module's own server ports (make spark-connect-up: 15002, UI 14040)
CONNECT_PORT, CONNECT_UI_PORT = 30002, 30040
KILL_AFTER = 1000  # the server's test hook kills a copying worker once a partition, after this many records


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A Spark Connect server on local[2,4] (two task slots, four attempts a task), stopped by pid.
    Its executors carry the kill hook: partitions of more than KILL_AFTER records get one attempt
    killed; the smaller ones of the other tests never reach it."""
    module = load_spark_cluster_module()
    state = tmp_path_factory.mktemp("spark-connect")
    markers = state / "killed"
    markers.mkdir()
    service = module.connect_service(state, "local[2,4]", CONNECT_PORT, CONNECT_UI_PORT, Path(sys.executable))
    service.env.update(kill_hook_env(KILL_AFTER, markers))  # its Python workers get the hook (tests/support/kill_hook.py)
    # no UI: the tests read none, and its fixed port was once found taken while the suite ran two workers
    service.conf["spark.ui.enabled"] = "false"
    assert module.connect_up(service, Path(sys.executable), timeout_s=120)
    try:
        yield f"sc://127.0.0.1:{CONNECT_PORT}", markers
    finally:
        module.down([service])
    assert service.pid() is None


def run_job(job: str, state: Path, clients: Path, remote: str, *extra: str) -> subprocess.CompletedProcess:
    """The job as a Python client: `python spark_jobs/JOB.py --remote ...`, no spark-submit."""
    return subprocess.run(
        [sys.executable, str(PROJECT_DIR / "spark_jobs" / f"{job}.py"), "--state-location", str(state),
         "--run-id", "run-1", "--clients", str(clients), "--remote", remote, *extra],
        capture_output=True, text=True, timeout=600, cwd=PROJECT_DIR, env={**os.environ})


def test_copy_and_verify_on_a_spark_connect_server_then_a_rerun_is_a_noop(stack, unique_name, tmp_path,
                                                                          connect_server):
    remote, _ = connect_server
    topics = seed_workload(stack, unique_name)
    manifest, clients = make_run(stack, tmp_path, topics)
    copied = run_job("copy_partitions", tmp_path / "state", clients, remote)
    assert copied.returncode == 0, copied.stderr[-4000:]
    assert "12 partitions copied, 6000 new records" in copied.stdout
    assert copied.stdout.count("ok: 500 records") == 12
    assert "Python workers from kmigrate_spark.daemon" in copied.stdout  # the server's conf (stack/spark_cluster.py)
    verified = run_job("verify_partitions", tmp_path / "state", clients, remote)
    assert verified.returncode == 0, verified.stderr[-4000:]
    assert "all 12 partitions equal (6000 records)" in verified.stdout
    [table] = attempts(manifest, "verification")
    assert table["all_equal"] and all(r["source_digest"] == r["target_digest"] for r in table["rows"])
    for topic in topics:
        for partition in range(4):
            assert_same_partition(stack, topic, partition)

    started = time.monotonic()
    again = run_job("copy_partitions", tmp_path / "state", clients, remote)
    rerun_s = time.monotonic() - started
    assert again.returncode == 0, again.stderr[-3000:]
    assert "12 partitions copied, 0 new records" in again.stdout
    rerun = [a for a in attempts(manifest, "copy-results") if all(r["records"] == 0 for r in a["rows"])]
    assert len(rerun) == 1 and len(rerun[0]["rows"]) == 12
    print(f"re-run on the Spark Connect server: {rerun_s:.1f}s wall, warm-up {rerun[0]['warm_up_seconds']:.2f}s")
    assert rerun_s < 60


def test_a_task_killed_on_the_server_is_retried_and_resumes(stack, unique_name, tmp_path, connect_server):
    remote, markers = connect_server
    topic = unique_name
    seed_plain(stack.source, topic, partitions=2, per_partition=4000, **{"batch.num.messages": 100})
    manifest, clients = make_run(stack, tmp_path, [topic])
    result = run_job("copy_partitions", tmp_path / "state", clients, remote, "--fetch-max-bytes", "16384")
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(p.name for p in markers.iterdir() if p.name.startswith(topic)) == [f"{topic}-0", f"{topic}-1"]
    [copy] = attempts(manifest, "copy-results")
    for row in copy["rows"]:
        assert row["ok"] and row["digests_equal"] and KILL_AFTER <= row["target_start"] < 4000
        assert row["records"] == 4000 - row["target_start"] and row["target_end"] == 4000
    verified = run_job("verify_partitions", tmp_path / "state", clients, remote)
    assert verified.returncode == 0, verified.stderr[-3000:]
    for partition in range(2):
        assert_same_partition(stack, topic, partition)


@pytest.mark.parametrize("remote, says", [
    ("sc://127.0.0.1:1", "cannot reach the Spark Connect server at sc://127.0.0.1:1"),
    ("http://127.0.0.1:15002", "is not a Spark Connect URL; give sc://HOST:PORT"),
])
def test_an_unreachable_or_wrong_server_fails_fast_with_one_message(stack, unique_name, tmp_path, remote, says):
    topics = seed_workload(stack, unique_name, topics=1, partitions=1, per_partition=10)
    _, clients = make_run(stack, tmp_path, topics)
    started = time.monotonic()
    result = run_job("copy_partitions", tmp_path / "state", clients, remote)
    assert result.returncode == 2 and time.monotonic() - started < 60
    assert says in result.stderr and "Traceback" not in result.stderr
