"""The kafka_move_consumers DAG (`dag.test()`, real stack; the mirror's driver in this process, its
terms copied here: no Spark job is needed to move a group): a consumer application stopped on the
source moves onto the mirror's DR cluster at exactly its committed offsets, and later back (`move_back`)
at those it reached there; a group that reads a topic outside the mirror is refused by name, without
retry, and nothing is written for it."""
from __future__ import annotations

import re
import uuid

from confluent_kafka import Consumer, TopicPartition
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.manifest import Manifest
from kmigrate.run.mirror.spec import MirrorSpec
from kmigrate.run.records.moves import moved_groups

from tests.support.airflow import returned, run_dag, task_states
from tests.support.kafka import create_topic, produce
from tests.support.mirror import mirrored, wait_caught_up


def _read_and_commit(cluster, group: str, topics: list[str], count: int) -> None:  # noqa: ANN001
    consumer = Consumer(cluster.consumer(**{"group.id": group, "enable.auto.commit": False,
                                            "auto.offset.reset": "earliest"}))
    consumer.subscribe(topics)
    read = 0
    try:
        while read < count:
            messages = [m for m in consumer.consume(count - read, 1.0) if not m.error()]
            read += len(messages)
            if messages:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def _commit_at(cluster, group: str, offsets: dict) -> None:  # noqa: ANN001
    """`group`'s offsets committed as given ({(topic, partition): offset}), by a consumer that never joins."""
    consumer = Consumer(cluster.consumer(**{"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def test_the_move_dag_moves_a_stopped_consumer_and_refuses_a_group_outside_the_mirror(stack, dagbag, tmp_path):
    prefix = f"dagmove{uuid.uuid4().hex[:6]}"
    topic, outside = f"{prefix}.orders", f"{prefix}x.audit"
    create_topic(stack.source, topic, 2)
    create_topic(stack.source, outside, 1)
    for partition in (0, 1):
        produce(stack.source, topic, [(None, b"%d" % i) for i in range(50)], partition=partition)
    produce(stack.source, outside, [(None, b"a")] * 5)
    app, wide = f"{prefix}-app", f"{prefix}-wide"
    _read_and_commit(stack.source, app, [topic], 70)
    _commit_at(stack.source, wide, {(topic, 0): 5, (outside, 0): 2})  # it read both topics
    with ClusterAdmin(stack.source) as admin:
        committed = admin.committed_offsets(app)
    state, run_name = tmp_path / "state", f"move-{uuid.uuid4().hex[:6]}"
    manifest = Manifest(str(state), run_name)
    spec = MirrorSpec(re.escape(prefix) + r"\.orders", groups=re.escape(prefix) + ".*", interval_s=0.5, term_s=60.0)
    with mirrored(stack, manifest, spec):
        wait_caught_up(manifest, stack.source, {topic: 2}, timeout_s=120)
        run = run_dag(dagbag, "kafka_move_consumers", run_name=run_name, state_location=str(state),
                      move_groups=[app], move_wait_s=60)
        assert task_states(run) == {"move_consumers": "success"}, task_states(run)
        shown = returned(run, "move_consumers")  # the task's XCom in the Airflow UI: its topic is still mirrored
        assert not shown["complete"] and f"topic {topic} (mirrored)" in shown["left"], shown
        assert [r["group"] for r in shown["moved"]] == [app]
        refused = run_dag(dagbag, "kafka_move_consumers", run_name=run_name, state_location=str(state),
                          move_groups=[wide], move_wait_s=60)
        assert task_states(refused) == {"move_consumers": "failed"}, task_states(refused)
        with ClusterAdmin(stack.target) as admin:
            assert admin.committed_offsets(app) == committed
        assert moved_groups(manifest)[app]["state"] == "moved"
        assert wide not in moved_groups(manifest)  # refused before the mirror stopped syncing it
        # the application reads 10 more on the DR cluster, stops, and its group moves back
        _read_and_commit(stack.target, app, [topic], 10)
        with ClusterAdmin(stack.target) as admin:
            on_dr = admin.committed_offsets(app)
        assert sum(on_dr.values()) == sum(committed.values()) + 10
        back = run_dag(dagbag, "kafka_move_consumers", run_name=run_name, state_location=str(state),
                       move_groups=[app], move_back=True, move_wait_s=60)
        assert task_states(back) == {"move_consumers": "success"}, task_states(back)
    with ClusterAdmin(stack.source) as admin:
        assert admin.committed_offsets(app) == on_dr
    assert app not in moved_groups(manifest)
