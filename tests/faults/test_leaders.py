"""The copier follows leaders on 3-broker clusters: a partition's leader SIGKILLed in the middle of
a copy (on the source or the target, whole batches or transactions) and a preferred-leader
election on the target during a copy each end in a finished copy with every offset preserved,
shown record by record; a target leader killed under transactions may instead leave a marker its
coordinator sent twice, which the copy must name and stop at (tests/integration/test_repeated_marker.py)."""
from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import ElectionType, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from kmigrate.copy import repeats
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import CopyError, RepeatedMarker
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support.faults import (
    MID_FAULT,
    RECORDS,
    TRANSACTIONS,
    compare,
    plain_workload,
    prepared,
    reassign,
    transactional_workload,
)
from tests.support.kafka import create_topic
from tests.support.waiting import wait_until

SMALL_FETCH = 32 << 10  # many fetches, so that the fault lands in the middle of the copy


def start_copy(stack, topic: str, on_progress=None, fetch_max_bytes: int = SMALL_FETCH):
    """Copy partition 0 in a thread; returns (thread, outcome dict with "result" or "error")."""
    end = prepared(stack, topic)
    outcome: dict = {}
    options = CopyOptions(run_id=f"faults-{uuid.uuid4().hex[:6]}", fetch_max_bytes=fetch_max_bytes,
                          progress_hook=on_progress, retry_for_s=120)

    def run():
        try:
            outcome["result"] = copy_partition(stack.source, stack.target, WorkUnit(topic, 0, end), options)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def once_after(records: int, action):
    """A progress hook that runs `action` once, the first time the copy has handed `records` on."""
    fired = threading.Event()

    def hook(copied: int) -> None:
        if copied >= records and not fired.is_set():
            fired.set()
            action()
    hook.fired = fired
    return hook


def finish(thread, outcome, timeout_s: float = 240):
    thread.join(timeout_s)
    assert not thread.is_alive(), f"the copy did not finish within {timeout_s} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


@pytest.mark.parametrize("side", ["source", "target"])
@pytest.mark.parametrize("workload", ["whole-batches", "transactional"])
def test_leader_killed_mid_copy(faulty, side, workload):
    topic = f"fault-kill-{side}-{workload}-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    (plain_workload if workload == "whole-batches" else transactional_workload)(faulty, topic)
    killed = {}

    def kill_leader():
        node = faulty.leader(side, topic, 0)
        faulty.kill(side, node)
        killed["node"] = node

    with ClusterAdmin(faulty.source) as source, ClusterAdmin(faulty.target) as target:
        prepare_target_topic(source, target, topic)  # created like the source's: replication 3, min.insync.replicas 2
        assert len(faulty.placement("target", topic, 0)[0]) == 3
        # a broker restarted by the test before may answer DescribeConfigs before it knows the new topic
        configs = {}
        wait_until(lambda: configs.update(target.topic_configs(topic)) or "min.insync.replicas" in configs,
                   f"{topic}: the target's configs", 30, ignore=MID_FAULT)
        assert configs["min.insync.replicas"] == "2"
    hook = once_after(TRANSACTIONS * 10 if workload == "transactional" else RECORDS // 3, kill_leader)
    thread, outcome = start_copy(faulty, topic, hook)
    try:
        result = finish(thread, outcome)
    except RepeatedMarker as exc:
        # the killed target leader had written a marker whose answer its coordinator never got: Kafka 4.3
        # appends the coordinator's second send of it anew (copy/repeats.py), and no copy can go on past it
        assert (side, workload) == ("target", "transactional"), exc
        assert repeats.find(faulty.target, topic, 0, exc.repeat, exc.repeat) == (exc.marker, exc.repeat)
        return
    assert hook.fired.is_set(), "the copy ended before the fault"
    assert faulty.leader(side, topic, 0) != killed["node"]  # the copy went on with another leader
    if workload == "whole-batches":
        assert result.whole_batches > 0
    else:
        assert result.markers > 0
    faulty.restart_killed()  # the killed broker comes back and catches up; the copy stays exact
    compare(faulty, topic, 1, f"{side} leader SIGKILLed mid-copy ({workload})")


def test_preferred_leader_election_on_the_target_during_the_copy(faulty):
    topic = f"fault-elect-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    plain_workload(faulty, topic)
    prepared(faulty, topic)
    # move the target partition's leadership off its preferred replica: stop that broker, bring it back
    preferred = faulty.leader("target", topic, 0)
    faulty.kill("target", preferred)
    wait_until(lambda: faulty.leader("target", topic, 0) not in (preferred, -1), "a new target leader", 60,
               ignore=MID_FAULT)
    faulty.restart_killed()
    admin = AdminClient(faulty.target.admin())

    def in_sync():
        described = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
        return len(described.partitions[0].isr) == 3
    wait_until(in_sync, "the preferred replica back in sync", 60, ignore=MID_FAULT)
    moved = {}

    def elect():
        moved["from"] = faulty.leader("target", topic, 0)
        admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(timeout=30)

    hook = once_after(RECORDS // 3, elect)
    thread, outcome = start_copy(faulty, topic, hook)
    result = finish(thread, outcome)
    assert hook.fired.is_set(), "the copy ended before the election"
    assert moved["from"] != preferred and faulty.leader("target", topic, 0) == preferred
    assert result.whole_batches > 0
    compare(faulty, topic, 1, "preferred-leader election on the target mid-copy")


def test_partition_reassignment_on_the_target_during_the_copy(faulty):
    """Replication factor 2 on both sides: the target partition's replicas are moved off its leader
    (AlterPartitionReassignments) while the copy runs, so a new replica catches up and the leader moves."""
    topic = f"fault-reassign-{uuid.uuid4().hex[:6]}"
    create_topic(faulty.source, topic, 1, replicas=2)
    wait_until(lambda: faulty.leader("source", topic, 0) >= 0, f"{topic}: a leader", 30, ignore=MID_FAULT)
    plain_workload(faulty, topic)
    with ClusterAdmin(faulty.source) as source, ClusterAdmin(faulty.target) as target:
        prepare_target_topic(source, target, topic)
    before, leader = faulty.placement("target", topic, 0)
    admin = AdminClient(faulty.target.admin())
    assert len(before) == 2  # the source's replication factor
    spare = next(n for n in faulty.clusters[1].nodes if n not in before)
    after = [spare, *(n for n in before if n != leader)]

    def reassigned():
        described = admin.describe_topics(TopicCollection([topic]))[topic].result(10).partitions[0]
        return [r.id for r in described.replicas] == after and len(described.isr) == 2 and described.leader.id != leader

    def move():  # the copy pauses, its connections open, until the replicas moved and the leader left
        reassign(faulty.target, topic, 0, after)
        wait_until(reassigned, f"{topic}: replicas {after}, both in sync, a new leader", 120, ignore=MID_FAULT)

    hook = once_after(RECORDS // 4, move)
    thread, outcome = start_copy(faulty, topic, hook)
    result = finish(thread, outcome)
    assert hook.fired.is_set(), "the copy ended before the reassignment"
    assert faulty.leader("target", topic, 0) != leader
    assert result.whole_batches > 0
    compare(faulty, topic, 1, "partition reassignment on the target mid-copy (the leader moved off)")


def test_brokers_that_do_not_come_back_in_time_fail_the_copy_which_a_rerun_resumes(faulty):
    """Two of the target's three brokers SIGKILLed mid-copy (and with them the controller quorum): no
    write can be acknowledged, so the copy gives up after retry_for_s naming the partition, with
    nothing at a wrong offset; once they are back, a re-run resumes from the target's end."""
    topic = f"fault-gone-{uuid.uuid4().hex[:6]}"
    faulty.create_topic(topic)
    plain_workload(faulty, topic)
    end = prepared(faulty, topic)

    def kill_two():
        leader = faulty.leader("target", topic, 0)
        faulty.kill("target", leader)
        faulty.kill("target", next(n for n in faulty.clusters[1].nodes if n != leader))

    hook = once_after(RECORDS // 3, kill_two)
    options = CopyOptions(run_id=f"faults-{uuid.uuid4().hex[:6]}", fetch_max_bytes=SMALL_FETCH, progress_hook=hook,
                          retry_for_s=15)
    began = time.monotonic()
    gave_up = rf"{topic}\[0\]: the copy was interrupted \d+ times in \d+ s \(retry_for_s 15\) and gave up"
    with pytest.raises(CopyError, match=gave_up):
        copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end), options)
    print(f"gave up after {time.monotonic() - began:.1f} s")
    faulty.restart_killed()
    result = copy_partition(faulty.source, faulty.target, WorkUnit(topic, 0, end),
                            CopyOptions(run_id=options.run_id))
    assert 0 < result.target_start < end and result.digests_equal
    compare(faulty, topic, 1, "two target brokers down past retry_for_s, then a re-run")
