"""The kafka_migration DAG (`dag.test()`, real stack) on a source that keeps writing through the pre-copy:
exactly-once producers interleaving transactions (aborts among them) in the same partitions, an
idempotent and a plain producer, lone abort markers, a compacted topic being cleaned, records
deleted (tests/support/live_source.py), and one transaction opened before the run and committed only
when the connectors are stopped. Every producer stops when stop_connectors starts, as an operator's
would; the run must pass with every partition equal to the source and to what the producers were
told, and the group's offsets exact."""
from __future__ import annotations

import contextlib
import threading
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest, Part
from kmigrate.run.records import events
from kmigrate.run.report.markdown import summarize

from tests.support.airflow import run_dag, task_states
from tests.support.live_source import LiveSource, compare_with_model
from tests.support.waiting import wait_until


def test_exactly_once_producers_through_the_rounds_and_a_transaction_open_until_the_cutover(stack, dagbag, tmp_path):
    live = LiveSource(stack.source, f"daglive{uuid.uuid4().hex[:6]}", seed=2026)
    live.create()
    run_name, state = "eos", tmp_path / "state"
    tx_topic = f"{live.prefix}.tx"
    # opened before the run, open through every pre-copy round, committed once the connectors are stopped
    long_open = Producer(stack.source.producer(**{"transactional.id": f"{live.prefix}-long", "transaction.timeout.ms": 600_000}))
    long_open.init_transactions(30)
    long_open.begin_transaction()
    long_delivered = []
    for i in range(5):
        long_open.produce(tx_topic, key=f"long-{i}".encode(), value=b"decided at the cutover", partition=i % 3,
                          on_delivery=lambda err, msg: long_delivered.append(msg) if err is None else None)
    long_open.flush(30)
    live.start()

    stopped = threading.Event()

    def stop_at_the_cutover() -> None:  # what an operator does when the run stops the connectors
        manifest = Manifest(str(state), run_name)
        with contextlib.suppress(AssertionError):  # a run that never stops them (it failed): stopped all the same
            wait_until(lambda: manifest.exists(Part.event(events.STOPPED)), "the run to stop the connectors",
                       timeout_s=600, poll_s=0.05)
        live.stop()
        long_open.commit_transaction(30)
        live.model.settle(long_delivered, committed=True)
        stopped.set()

    watcher = threading.Thread(target=stop_at_the_cutover, daemon=True)
    watcher.start()
    group = f"{live.prefix}-readers"
    reader = Consumer(stack.source.consumer(group))
    reader.commit(offsets=[TopicPartition(f"{live.prefix}.mixed", 0, 3), TopicPartition(tx_topic, 1, 2)],
                  asynchronous=False)
    reader.close()
    try:
        run = run_dag(dagbag, topics_include=live.pattern, groups=group, quiesce_seconds=3, pre_copy_max_rounds=3,
                      pre_copy_converged_records=100, state_location=str(state), run_name=run_name)
    finally:
        if not stopped.is_set():
            live.stop()
            long_open.abort_transaction(30)
        watcher.join(60)
    assert str(run.state) == "success", task_states(run)
    summary = summarize(Manifest(str(state), run_name))
    assert summary["partitions"] == summary["partitions_equal"] == sum(live.topics.values())
    assert summary["groups"] == summary["groups_exact"] == 1
    assert summary["pre_copy_rounds"], "the pre-copy ran while the producers wrote"
    assert compare_with_model(stack, live.topics, live.compacted, live.model) > 0
    assert all(f"long-{i}".encode() in {r[0] for v in live.model.visible.values() for r in v.values()} for i in range(5))
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        assert target.committed(group) == source.committed(group)
