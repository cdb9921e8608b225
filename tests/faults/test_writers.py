"""One writer per target partition, and copies that die half-way: the copy process SIGKILLed inside a
gap transaction and between alignment fillers and DeleteRecords, two copies of one partition
started at once, and a second run over topics another run holds. Each ends with a record-by-record
comparison on the 3-broker stack."""
from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kmigrate.claims.runs import claim_topics, release_topics
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import PartitionHeld
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit

from tests.support.faults import RECORDS, compare, plain_workload, prepared, transactional_workload
from tests.support.spark import make_run, output, spark_submit
from tests.support.stack import PROJECT_DIR

KILL_AT_STEP = """
import os, signal, sys
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.model import WorkUnit
source, target, topic, end, step, run = sys.argv[1:7]
def hook(reached):
    if reached == step:
        os.kill(os.getpid(), signal.SIGKILL)
copy_partition(ClusterConfig.from_bootstrap("source", source), ClusterConfig.from_bootstrap("target", target),
               WorkUnit(topic, 0, int(end)), CopyOptions(run_id=run, step_hook=hook, verify=False))
"""


def kill_copy_at(stack, topic: str, end: int, step: str, run: str) -> None:
    killed = subprocess.run([sys.executable, "-c", KILL_AT_STEP, stack.source.bootstrap_servers,
                             stack.target.bootstrap_servers, topic, str(end), step, run],
                            cwd=PROJECT_DIR, capture_output=True, timeout=180)
    assert killed.returncode == -signal.SIGKILL, f"the copy was not killed at {step}: {killed.stderr.decode()[-2000:]}"


def test_copy_killed_inside_a_gap_transaction_is_finished_by_the_next_attempt(faulty):
    topic = f"fault-gap-txn-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    transactional_workload(faulty, topic)  # every fifth transaction aborted: gaps rendered in transactions
    end, run = prepared(faulty, topic), f"faults-{uuid.uuid4().hex[:6]}"
    kill_copy_at(faulty, topic, end, "gap-transaction-open", run)
    with ClusterAdmin(faulty.target) as target:
        _, partial = target.watermarks(topic, 0)
    assert 0 < partial < end
    began = time.monotonic()
    # the next attempt of the same run: its lease breaks the dead holder's at once (same host, process
    # gone), its producer (same transactional id) fences the open transaction and aborts it
    result = copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end), CopyOptions(run_id=run))
    assert time.monotonic() - began < CopyOptions().lease_s, "the next attempt waited for the dead copier's lease"
    assert result.digests_equal and result.markers > 0
    compare(faulty, topic, 1, "copy SIGKILLed inside a gap transaction")


def test_copy_killed_between_alignment_fillers_and_delete_records_is_finished_by_the_next_attempt(faulty):
    topic = f"fault-align-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    plain_workload(faulty, topic)
    with ClusterAdmin(faulty.source) as source:
        source.delete_records(topic, 0, RECORDS // 3)  # the source's log start above 0: the target is aligned
    end, run = prepared(faulty, topic), f"faults-{uuid.uuid4().hex[:6]}"
    kill_copy_at(faulty, topic, end, "fillers-written", run)
    with ClusterAdmin(faulty.target) as target:
        assert target.watermarks(topic, 0) == (0, RECORDS // 3)  # fillers up to the log start, not deleted yet
    result = copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end), CopyOptions(run_id=run))
    assert result.digests_equal and result.records == end - RECORDS // 3
    compare(faulty, topic, 1, "copy SIGKILLed between alignment fillers and DeleteRecords")


@pytest.mark.parametrize("workload", ["whole-batches", "transactional"])
def test_two_copies_of_one_partition_started_at_once(faulty, workload):
    topic = f"fault-twice-{workload}-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    (plain_workload if workload == "whole-batches" else transactional_workload)(faulty, topic)
    end = prepared(faulty, topic)
    options = CopyOptions(run_id=f"faults-{uuid.uuid4().hex[:6]}", fetch_max_bytes=32 << 10)
    start = threading.Barrier(2)
    outcomes: list[dict] = [{}, {}]

    def copy(outcome: dict) -> None:
        start.wait()
        try:
            outcome["result"] = copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end), options)
        except PartitionHeld as exc:
            outcome["held"] = exc
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    threads = [threading.Thread(target=copy, args=(o,), daemon=True) for o in outcomes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(240)
    assert not any(t.is_alive() for t in threads), "a copy did not end"
    assert not [o["error"] for o in outcomes if "error" in o], outcomes
    results = [o["result"] for o in outcomes if "result" in o]
    assert len(results) + sum("held" in o for o in outcomes) == 2, outcomes
    # one copied everything; the other, if it copied at all, began where the first had ended
    winner = max(results, key=lambda r: r.records)
    assert winner.target_start == 0 and winner.records > 0
    for other in results:
        if other is not winner:
            assert other.target_start == end and other.records == 0
    compare(faulty, topic, 1, f"two copies of one partition at once ({workload})")


def test_a_second_run_over_the_same_topics_is_refused_before_it_writes(faulty, tmp_path):
    topic = f"fault-second-run-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    plain_workload(faulty, topic)
    first, second = f"first-{uuid.uuid4().hex[:6]}", f"second-{uuid.uuid4().hex[:6]}"
    claim_topics(faulty.target, first, [topic], dag="kafka_migration")  # what the first run's DAG does
    _, clients = make_run(faulty, tmp_path, [topic], run_id=second)
    refused = spark_submit("copy_partitions", tmp_path / "state", second, clients)
    assert refused.returncode == 2, output(refused)[-3000:]
    text = output(refused)
    assert f"run {first!r} of DAG 'kafka_migration'" in text and f"holds {topic}" in text, text[-3000:]
    assert f"python -m kmigrate.claims release {first}" in text
    with ClusterAdmin(faulty.target) as target:
        assert topic not in target.list_topics()  # refused before it wrote anything
    assert release_topics(faulty.target, first)  # the first run ends (its report releases them)
    copied = spark_submit("copy_partitions", tmp_path / "state", second, clients)
    assert copied.returncode == 0, output(copied)[-3000:]
    compare(faulty, topic, 1, "a second run over the same topics (refused, then run once the first ended)")
