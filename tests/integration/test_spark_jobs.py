"""The Spark copy and verify jobs through a real `spark-submit`, on `local[2]` and on a Spark
standalone cluster (a master and two workers started from the pinned pyspark), against the local
Kafka stack. The tests of what the driver decides (refusals of bad input, partitions settled
without a task, a verification naming a difference) run the jobs as Python clients of the test
process's Spark Connect server (`dag_spark_server`) instead: the same driver code either way, and a
spark-submit is a JVM start each (about 25 s on a loaded 2-core machine). The wrong bootstrap keeps
spark-submit, to show that a refusal's exit code and message come through it."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from kmigrate.config import ClusterConfig
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.copying.plan import build_plan
from kmigrate_spark.clients import write_clients

from tests.support.kafka import produce, seed_plain
from tests.support.kill_hook import kill_hook_env
from tests.support.migration import assert_same_partition
from tests.support.spark import attempts, make_run, output, run_client, seed_workload, spark_submit
from tests.support.stack import load_spark_cluster_module

# this module's own standalone cluster ports: master 30077, workers 30078-9, UIs 30090-2 (make spark-up: 17077..., 18090...)
MASTER_PORT, MASTER_UI_PORT = 30077, 30090


def copy_and_verify(stack, tmp_path: Path, topics: list[str], master: str) -> Manifest:
    manifest, clients = make_run(stack, tmp_path, topics)
    copied = spark_submit("copy_partitions", tmp_path / "state", "run-1", clients, master=master)
    assert copied.returncode == 0, output(copied)[-4000:]
    assert "12 partitions copied, 6000 new records" in copied.stdout
    assert copied.stdout.count("ok: 500 records") == 12  # a progress line per partition
    # the jobs' own daemon, the user's conf not naming another
    assert "Python workers from kmigrate_spark.daemon" in copied.stdout
    assert "driver JVM with kmigrate's JIT and GC options" in copied.stdout  # kmigrate_spark/conf.py
    [copy] = attempts(manifest, "copy-results")
    assert len(copy["rows"]) == 12 and all(r["ok"] and r["digests_equal"] and r["records"] == 500 for r in copy["rows"])

    verified = spark_submit("verify_partitions", tmp_path / "state", "run-1", clients, master=master)
    assert verified.returncode == 0, output(verified)[-4000:]
    assert "all 12 partitions equal (6000 records)" in verified.stdout
    [table] = attempts(manifest, "verification")
    assert table["all_equal"] and len(table["rows"]) == 12
    for row in table["rows"]:
        assert row["equal"] and row["source_digest"] == row["target_digest"]
        assert (row["target_log_start"], row["target_end"]) == (row["source_log_start"], row["snapshot_end"]) == (0, 500)
    for topic in topics:
        for partition in range(4):
            assert_same_partition(stack, topic, partition)
    return manifest


def test_copy_and_verify_on_local_then_a_rerun_is_a_quick_noop(stack, unique_name, tmp_path):
    topics = seed_workload(stack, unique_name)
    manifest = copy_and_verify(stack, tmp_path, topics, "local[2]")

    started = time.monotonic()
    # a daemon module the user names wins over the jobs' own (here pyspark's stock daemon); a
    # driver launched without kmigrate's JVM options says how to add them
    again = spark_submit("copy_partitions", tmp_path / "state", "run-1", tmp_path / "clients.json",
                         conf=("spark.python.daemon.module=pyspark.daemon", "spark.driver.extraJavaOptions="))
    rerun_s = time.monotonic() - started
    assert again.returncode == 0, output(again)[-3000:]
    assert "Python workers from pyspark.daemon" in again.stdout
    assert "driver JVM without kmigrate's JIT and GC options" in again.stdout
    assert "12 partitions copied, 0 new records" in again.stdout
    rerun = [a for a in attempts(manifest, "copy-results") if all(r["records"] == 0 for r in a["rows"])]
    assert len(rerun) == 1 and len(rerun[0]["rows"]) == 12 and all(r["digests_equal"] for r in rerun[0]["rows"])
    print(f"re-run of a finished copy: {rerun_s:.1f}s wall, {rerun[0]['seconds']:.1f}s after the session started")
    assert rerun[0]["seconds"] < 30


def test_partitions_empty_on_both_sides_get_no_task_and_verify_equal(stack, unique_name, tmp_path, dag_spark_server):
    """Of four partitions, two never written (empty at 0 on both sides: settled without a task) and
    one emptied by DeleteRecords (its target must still be aligned to the source's log start)."""
    topic = unique_name
    with ClusterAdmin(stack.source) as admin:
        admin.create_topic(topic, 4, {})
        for partition in (0, 1):
            produce(stack.source, topic, [(b"k%d" % i, b"v") for i in range(50)], partition=partition)
        admin.delete_records(topic, 1, 50)  # partition 1: empty, log start 50
    manifest, clients = make_run(stack, tmp_path, [topic])
    copied = run_client("copy_partitions", tmp_path / "state", clients, dag_spark_server)
    assert copied.returncode == 0, output(copied)[-4000:]
    assert "2 partitions at their end on the target already (empty, or copied by this run): 2 to copy" in copied.stdout
    [copy] = attempts(manifest, "copy-results")
    rows = {r["partition"]: r for r in copy["rows"]}
    assert sorted(rows) == [0, 1, 2, 3] and all(r["ok"] for r in rows.values())
    assert rows[2]["skipped"] and rows[3]["skipped"] and not rows[1].get("skipped")
    verified = run_client("verify_partitions", tmp_path / "state", clients, dag_spark_server)
    assert verified.returncode == 0, output(verified)[-4000:]
    # partition 1 too, once the copy aligned its target at 50
    assert "3 partitions empty on both sides at the same offset: equal; 1 to read" in verified.stdout
    [table] = attempts(manifest, "verification")
    assert table["all_equal"] and sorted(r["partition"] for r in table["rows"]) == [0, 1, 2, 3]
    for partition in range(4):
        assert_same_partition(stack, topic, partition)  # partition 1 aligned at 50 on the target too


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """A standalone master and two one-core workers on this module's own ports, stopped by pid."""
    module = load_spark_cluster_module()
    services = module.cluster_services(tmp_path_factory.mktemp("spark-cluster"), 2, MASTER_PORT, MASTER_UI_PORT,
                                       1, "1g")
    started = module.up(services, Path(sys.executable), MASTER_UI_PORT, timeout_s=300)
    try:
        yield f"spark://127.0.0.1:{MASTER_PORT}"
    finally:
        module.down(started)


def test_copy_and_verify_on_a_standalone_cluster(stack, unique_name, tmp_path, spark_cluster):
    topics = seed_workload(stack, unique_name)
    copy_and_verify(stack, tmp_path, topics, spark_cluster)


def copy_with_kill_hook(stack, tmp_path: Path, topic: str, partitions: int, master: str,
                        spared: tuple[int, ...] = ()) -> tuple[Manifest, Path, Path, subprocess.CompletedProcess]:
    """Seed `topic` with 4,000 records a partition and copy it with the kill hook set: each
    partition's worker is SIGKILLed once after 1,000 records, except the `spared` partitions."""
    # record batches of at most 100 records and small fetches, so that the copier reports progress
    # (and the hook fires) well before the end
    seed_plain(stack.source, topic, partitions=partitions, per_partition=4000, **{"batch.num.messages": 100})
    manifest, clients = make_run(stack, tmp_path, [topic])
    markers = tmp_path / "killed"
    markers.mkdir()
    for partition in spared:  # the hook kills a partition once: these count as killed already
        (markers / f"{topic}-{partition}").touch()
    result = spark_submit("copy_partitions", tmp_path / "state", "run-1", clients, "--fetch-max-bytes", "16384",
                          master=master, env=kill_hook_env(1000, markers))
    assert result.returncode == 0, output(result)[-4000:]
    return manifest, clients, markers, result


def test_a_task_killed_mid_copy_is_retried_and_resumes(stack, unique_name, tmp_path, dag_spark_server):
    topic = unique_name
    # local[2,4]: two slots, four attempts per task
    manifest, clients, markers, result = copy_with_kill_hook(stack, tmp_path, topic, 2, "local[2,4]")
    assert sorted(p.name for p in markers.iterdir()) == [f"{topic}-0", f"{topic}-1"]  # both were killed once
    assert "Python worker exited unexpectedly" in output(result) or "crashed" in output(result)
    [copy] = attempts(manifest, "copy-results")
    for row in copy["rows"]:
        # the retry resumed from what the killed attempt had written, and finished the partition
        assert row["ok"] and row["digests_equal"] and 1000 <= row["target_start"] < 4000
        assert row["records"] == 4000 - row["target_start"] and row["target_end"] == 4000
    verified = run_client("verify_partitions", tmp_path / "state", clients, dag_spark_server)
    assert verified.returncode == 0, output(verified)[-3000:]
    for partition in range(2):
        assert_same_partition(stack, topic, partition)  # no duplicate, nothing missing


def test_a_task_failing_past_its_retries_stops_the_job_and_the_rest_run_one_job_each(stack, unique_name, tmp_path):
    topic = unique_name
    # local[2]: one attempt a task, so the SIGKILL of partition 0's worker makes Spark stop the job
    manifest, _, _, result = copy_with_kill_hook(stack, tmp_path, topic, 3, "local[2]", spared=(1, 2))
    assert "the Spark job stopped" in output(result)
    assert "run again, one Spark job each" in output(result)
    assert "3 partitions copied" in result.stdout
    [copy] = attempts(manifest, "copy-results")
    rows = {r["partition"]: r for r in copy["rows"]}
    assert all(r["ok"] and r["digests_equal"] and r["target_end"] == 4000 for r in rows.values())
    assert 1000 <= rows[0]["target_start"] < 4000  # its own job resumed from the killed attempt's end
    for partition in range(3):
        assert_same_partition(stack, topic, partition)  # no duplicate, nothing missing


def test_verify_names_a_partition_that_differs(stack, unique_name, tmp_path, dag_spark_server):
    topics = seed_workload(stack, unique_name, topics=1, partitions=2, per_partition=100)
    manifest, clients = make_run(stack, tmp_path, topics)
    assert run_client("copy_partitions", tmp_path / "state", clients, dag_spark_server).returncode == 0
    produce(stack.target, topics[0], [(b"stray", b"written on the target after the copy")], partition=1)
    result = run_client("verify_partitions", tmp_path / "state", clients, dag_spark_server)
    assert result.returncode == 1
    assert f"1 of 2 partitions differ: {topics[0]}[1]" in output(result)
    [table] = attempts(manifest, "verification")
    rows = {r["partition"]: r for r in table["rows"]}
    assert not table["all_equal"] and rows[0]["equal"] and not rows[1]["equal"]
    assert "target end 101 > source end 100" in rows[1]["problems"]


def test_wrong_bootstrap_fails_fast_with_one_message(stack, unique_name, tmp_path):
    topics = seed_workload(stack, unique_name, topics=1, partitions=1, per_partition=10)
    Manifest(str(tmp_path / "state"), "run-1").write_once("plan", build_plan(stack.source, topics))
    clients = write_clients(tmp_path / "clients.json", ClusterConfig.from_bootstrap("source", "127.0.0.1:1"),
                            stack.target)
    started = time.monotonic()
    result = spark_submit("copy_partitions", tmp_path / "state", "run-1", clients)
    assert result.returncode == 2 and time.monotonic() - started < 60
    assert "source cluster at 127.0.0.1:1 did not answer within 10s" in output(result)
    assert "check bootstrap.servers" in output(result)


def test_unknown_topic_fails_fast_and_creates_nothing(stack, unique_name, tmp_path, dag_spark_server):
    topics = seed_workload(stack, unique_name, topics=1, partitions=1, per_partition=10)
    missing = f"{unique_name}-missing"
    plan = build_plan(stack.source, topics)
    plan["units"].append({"topic": missing, "partition": 0, "end_offset": 5, "mode": "preserve", "offsets": 5})
    Manifest(str(tmp_path / "state"), "run-1").write_once("plan", plan)
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    result = run_client("copy_partitions", tmp_path / "state", clients, dag_spark_server)
    assert result.returncode == 2
    assert f"topic '{missing}' of the plan does not exist on the source cluster" in output(result)
    with ClusterAdmin(stack.target) as target:
        assert target.partition_count(missing) is None


def test_unreadable_state_location_fails_fast(stack, tmp_path, dag_spark_server):
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the state location's folder should be")
    for job in ("copy_partitions", "verify_partitions"):
        result = run_client(job, blocker / "state", clients, dag_spark_server)
        assert result.returncode == 2
        assert "reading part 'plan' of the run manifest" in output(result)
        assert "check that the state location exists" in output(result)


def test_client_file_others_can_read_is_refused(tmp_path, stack, dag_spark_server):
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    clients.chmod(0o644)
    Manifest(str(tmp_path / "state"), "run-1").write_once("plan", {"units": []})
    result = run_client("copy_partitions", tmp_path / "state", clients, dag_spark_server)
    assert result.returncode == 2
    assert "readable by others" in output(result) and "chmod 600" in output(result)


def test_job_without_a_plan_says_what_to_do(tmp_path, stack, dag_spark_server):
    clients = write_clients(tmp_path / "clients.json", stack.source, stack.target)
    result = run_client("copy_partitions", tmp_path / "state", clients, dag_spark_server)
    assert result.returncode == 2
    assert "has no plan; run the snapshot step first" in output(result)


def test_jobs_whose_target_is_the_source_refuse_before_writing(stack, unique_name, tmp_path, dag_spark_server):
    """Run by hand with a clients file whose target is the source (here under another address, so
    that only the cluster ids tell): both jobs refuse before writing; the source gets no claims
    topic and its topic's configs stay as they were."""
    from kmigrate.claims.log import CLAIMS_TOPIC

    topics = seed_workload(stack, unique_name, topics=1, partitions=1, per_partition=10)
    Manifest(str(tmp_path / "state"), "run-1").write_once("plan", build_plan(stack.source, topics))
    port = stack.source.addresses[0][1]
    clients = write_clients(tmp_path / "clients.json", stack.source,
                            ClusterConfig.from_bootstrap("target", f"127.0.0.1:{port}"))
    with ClusterAdmin(stack.source) as admin:
        assert CLAIMS_TOPIC not in admin.list_topics()  # a source has none
        configs = admin.topics_configs(topics)
    for job in ("copy_partitions", "verify_partitions"):
        result = run_client(job, tmp_path / "state", clients, dag_spark_server)
        assert result.returncode == 2, output(result)[-3000:]
        assert "are the same cluster (id " in output(result) and "pick another target" in output(result)
    with ClusterAdmin(stack.source) as admin:
        assert CLAIMS_TOPIC not in admin.list_topics()
        assert admin.topics_configs(topics) == configs
    assert [p for p in Manifest(str(tmp_path / "state"), "run-1").parts() if p != "plan"] == []
