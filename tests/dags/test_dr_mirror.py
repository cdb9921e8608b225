"""The kafka_dr_mirror DAG (`dag.test()`, real stack, its Spark jobs on a Spark Connect server of
this module's own ports): the start task starts the mirror, the deferred follower starts it again
after its process is killed, and the run ends once a stop is requested, the DR cluster equal to the
source."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import uuid
from pathlib import Path

from kmigrate.manifest import Manifest
from kmigrate.run.mirror import status as mirror_status
from kmigrate.run.mirror.loop import STARTS, request_stop

from tests.support.airflow import run_dag, task_states
from tests.support.kafka import produce, seed_plain
from tests.support.migration import assert_same_partition
from tests.support.mirror import wait_caught_up, wait_for_round
from tests.support.stack import load_spark_cluster_module
from tests.support.waiting import wait_until

PORT, UI_PORT = 30202, 30240


def starts(manifest: Manifest) -> list[dict]:
    return [manifest.read(p) for p in manifest.parts() if p.startswith(f"{STARTS}/")]


def test_the_mirror_dag_restarts_a_killed_mirror_and_ends_when_asked_to_stop(stack, dagbag, tmp_path, monkeypatch):
    module = load_spark_cluster_module()
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_MIRROR",
                       json.dumps({"conn_type": "spark_connect", "host": "127.0.0.1", "port": PORT}))
    server = module.connect_service(tmp_path / "spark", "local[2]", PORT, UI_PORT, Path(sys.executable))
    server.conf["spark.ui.enabled"] = "false"
    assert module.connect_up(server, Path(sys.executable), timeout_s=120)
    topic = f"dagmirror{uuid.uuid4().hex[:6]}.events"
    seed_plain(stack.source, topic, partitions=2, per_partition=300)
    state, run_name = tmp_path / "state", f"dr-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    errors: list[BaseException] = []

    def meanwhile() -> None:
        try:
            wait_for_round(manifest, 2, timeout_s=180)
            produce(stack.source, topic, [(b"k", b"while mirrored")] * 50, 1)
            [first] = starts(manifest)
            os.kill(first["pid"], signal.SIGKILL)  # the follower finds its heartbeat stale and starts it again
            wait_until(lambda: len(starts(manifest)) == 2, "the mirror started again", 120)
            produce(stack.source, topic, [(b"k", b"after the restart")] * 30, 0)
            wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=120)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
        finally:
            request_stop(manifest, "the test is done")  # ends the DAG run, whatever happened

    helper = threading.Thread(target=meanwhile, daemon=True)
    helper.start()
    try:
        run = run_dag(dagbag, "kafka_dr_mirror", run_name=run_name, topics_include=topic.replace(".", r"\."),
                      state_location=str(state), spark_connect_conn_id="spark_connect_mirror", stale_after_s=8,
                      interval_s=0.5)
        helper.join(60)
    finally:
        request_stop(manifest, "the test is done")
        for start in starts(manifest):  # a mirror left running by a failed run
            try:
                os.killpg(start["pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass
        module.down([server])
    if errors:
        raise errors[0]
    assert str(run.state) == "success", task_states(run)
    for partition in range(2):
        assert_same_partition(stack, topic, partition)
    final = mirror_status.read(manifest)
    assert final["stopped"] and final["totals"]["records"] == 680
    assert len(starts(manifest)) == 2
