"""The Spark copy and verify jobs as plain Python clients of a running Spark Connect server (started
from the pinned pyspark by stack/spark_cluster.py, on this module's own ports), against the local
Kafka stack: no JVM in the job's process, the server's executors run the copier."""
from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import pytest
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.driver import VERIFIED
from kmigrate_spark.clients import write_clients

from tests.support.kafka import commit_offsets, seed_plain
from tests.support.kill_hook import kill_hook_env
from tests.support.live_source import LiveSource, compare_with_model
from tests.support.migration import assert_same_partition
from tests.support.mirror import start_mirror, stop_mirror, wait_caught_up, wait_for_round
from tests.support.spark import attempts, make_run, run_client, seed_workload
from tests.support.stack import load_spark_cluster_module
from tests.support.waiting import wait_until

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
    assert module.connect_up(service, Path(sys.executable), timeout_s=300)
    try:
        yield f"sc://127.0.0.1:{CONNECT_PORT}", markers
    finally:
        module.down([service])
    assert service.pid() is None


def test_copy_and_verify_on_a_spark_connect_server_then_a_rerun_is_a_noop(stack, unique_name, tmp_path,
                                                                          connect_server):
    remote, _ = connect_server
    topics = seed_workload(stack, unique_name)
    manifest, clients = make_run(stack, tmp_path, topics)
    copied = run_client("copy_partitions", tmp_path / "state", clients, remote)
    assert copied.returncode == 0, copied.stderr[-4000:]
    assert "12 partitions copied, 6000 new records" in copied.stdout
    assert copied.stdout.count("ok: 500 records") == 12
    assert "Python workers from kmigrate_spark.daemon" in copied.stdout  # the server's conf (stack/spark_cluster.py)
    verified = run_client("verify_partitions", tmp_path / "state", clients, remote)
    assert verified.returncode == 0, verified.stderr[-4000:]
    assert "all 12 partitions equal (6000 records)" in verified.stdout
    [table] = attempts(manifest, "verification")
    assert table["all_equal"] and all(r["source_digest"] == r["target_digest"] for r in table["rows"])
    for topic in topics:
        for partition in range(4):
            assert_same_partition(stack, topic, partition)

    started = time.monotonic()
    again = run_client("copy_partitions", tmp_path / "state", clients, remote)
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
    result = run_client("copy_partitions", tmp_path / "state", clients, remote, "--fetch-max-bytes", "16384")
    assert result.returncode == 0, result.stderr[-4000:]
    assert sorted(p.name for p in markers.iterdir() if p.name.startswith(topic)) == [f"{topic}-0", f"{topic}-1"]
    [copy] = attempts(manifest, "copy-results")
    for row in copy["rows"]:
        assert row["ok"] and row["digests_equal"] and KILL_AFTER <= row["target_start"] < 4000
        assert row["records"] == 4000 - row["target_start"] and row["target_end"] == 4000
    verified = run_client("verify_partitions", tmp_path / "state", clients, remote)
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
    result = run_client("copy_partitions", tmp_path / "state", clients, remote)
    assert result.returncode == 2 and time.monotonic() - started < 60
    assert says in result.stderr and "Traceback" not in result.stderr


def test_a_mirror_keeps_a_live_exactly_once_source_on_the_dr_cluster_through_killed_tasks_and_a_killed_driver(
        stack, unique_name, tmp_path, connect_server):
    """Transactional, idempotent, plain and compacting producers and a deleter write while the mirror
    runs; its first copies are killed on the server (the kill hook: once a bulk partition), its
    driver is killed with SIGKILL and started again without its selection. Once the producers stop,
    the DR cluster holds exactly what the producers were told, at the source's offsets, and the
    group's offsets as the source has them, capped at the DR cluster's ends."""
    remote, markers = connect_server
    live = LiveSource(stack.source, unique_name, seed=int(os.environ.get("KMIGRATE_MIRROR_SEED", "3511")))
    live.create()
    bulk = f"{unique_name}.bulk"
    seed_plain(stack.source, bulk, partitions=2, per_partition=4000, **{"batch.num.messages": 100})
    group = f"{unique_name}.readers"
    state, run_id = tmp_path / "state", "mirror-1"
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    manifest = Manifest(str(state), run_id)
    live.start()
    processes = [start_mirror(state, run_id, clients, remote, "--topics", live.pattern, "--groups", re.escape(group),
                              "--interval-s", "0.5", "--fetch-max-bytes", "16384", "--verify-every-s", "2")]
    try:
        before_kill = wait_for_round(manifest, 3)["round"]
        commit_offsets(stack.source, group, {(bulk, 0): 1234, (bulk, 1): 4500})  # 4500: past the end (4000)
        processes[0].kill()
        processes[0].communicate(timeout=30)
        processes.append(start_mirror(state, run_id, clients, remote))  # the run's selection, from its manifest
        wait_for_round(manifest, before_kill + 3)
        # the tasks verify every 2 s what they copied; a term that ends sooner reports none, so the
        # producers write on until a verification is in the manifest
        wait_until(lambda: (manifest.read(VERIFIED) or {}).get("rows"), "a verification while the producers write", 120)
        live.stop()
        status = wait_caught_up(manifest, stack.source, {**live.topics, bulk: 2})
        stop_mirror(manifest, processes[1])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                print(process.communicate(timeout=30)[0][-6000:])
    assert sorted(p.name for p in markers.iterdir() if p.name.startswith(bulk)) == [f"{bulk}-0", f"{bulk}-1"]
    compared = compare_with_model(stack, live.topics, live.compacted, live.model)
    for partition in range(2):
        assert_same_partition(stack, bulk, partition)
    with ClusterAdmin(stack.target) as admin:
        assert admin.committed_offsets(group) == {(bulk, 0): 1234, (bulk, 1): 4000}
    assert status["behind_s_max"] is not None and all(p["error"] is None for p in status["partitions"])
    final = mirror_status.read(manifest)
    assert final["stopped"] and final["totals"]["records"] > 0
    verified = manifest.read(VERIFIED)["rows"]  # while the producers wrote, every couple of seconds
    assert verified and all(r["equal"] for r in verified), [r for r in verified if not r["equal"]]
    assert len([p for p in manifest.parts() if p.startswith("mirror-starts/")]) == 2
    print(f"mirror: {compared} records compared, {final['round']} rounds, {live.model.transactions} transactions")
