"""A task's partitions copied together (copy_bin): the partitions of plain batches copied entirely in
shared requests, each other partition by the per-partition copier, every offset and record kept."""
from __future__ import annotations

from kmigrate.claims import leases
from kmigrate.claims.leases import PartitionLease
from kmigrate.claims.log import claim_log
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.together import copy_together
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.copying import tasks
from kmigrate.run.targets.prepare import prepare_target_topic
from kmigrate.run.copying.tasks import copy_bin

from tests.support.kafka import TxnSeeder, create_topic, produce
from tests.support.migration import assert_same_partition
from tests.support.waiting import wait_until


def prepare(stack, *topics):
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic in topics:
            prepare_target_topic(source, target, topic)


def test_a_task_copies_plain_partitions_together_and_the_others_one_by_one(stack, unique_name, source_untouched,
                                                                          monkeypatch):
    plain, mixed = f"{unique_name}-plain", f"{unique_name}-mixed"
    create_topic(stack.source, plain, partitions=4)
    create_topic(stack.source, mixed)
    for p in range(3):  # partition 3 stays empty
        for flush in range(3):  # several batches a partition
            produce(stack.source, plain, [(b"k%d" % i, b"p%d-%d-%d" % (p, flush, i)) for i in range(50 + p)], partition=p)
    seed = TxnSeeder(stack.source, mixed)
    seed.records(20, "a")
    seed.transaction(5, "b", commit=True)
    seed.records(10, "c")
    for topic in (plain, mixed):
        source_untouched(topic)
    prepare(stack, plain, mixed)
    # partition 2 is half copied already, by an earlier attempt of the per-partition copier
    copy_partition(stack.source, stack.target, WorkUnit(plain, 2, 52), CopyOptions(verify=False))
    units = [WorkUnit(plain, p, 3 * (50 + p) if p < 3 else 0) for p in range(4)] + [WorkUnit(mixed, 0, seed.end)]

    one_by_one = []

    def copy_one(source, target, unit, *args, **kwargs):
        one_by_one.append((unit.topic, unit.partition))
        return copy_partition(source, target, unit, *args, **kwargs)

    monkeypatch.setattr(tasks, "copy_partition", copy_one)
    rows = copy_bin([(u, {}) for u in units], (stack.source, stack.target), "run-together", verify=True)

    assert all(r["ok"] and r["digests_equal"] for r in rows), rows
    assert one_by_one == [(plain, 2), (plain, 3), (mixed, 0)]  # resumed, empty, with a transaction
    by_partition = {(r["topic"], r["partition"]): r for r in rows}
    assert [by_partition[(plain, p)]["whole_batches"] for p in range(2)] == [3, 3]
    assert by_partition[(plain, 2)]["target_start"] == 52  # resumed where the earlier attempt stopped
    for p in range(4):
        assert_same_partition(stack, plain, p)
    assert_same_partition(stack, mixed, 0)


def test_partitions_that_do_not_qualify_are_left_untouched(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name, partitions=3)
    for p in range(3):
        produce(stack.source, unique_name, [(b"k%d" % i, b"v%d" % i) for i in range(30)], partition=p)
    source_untouched(unique_name)
    prepare(stack, unique_name)
    produce(stack.target, unique_name, [(b"stray", b"not a copy")], partition=1)  # a target not empty
    units = [WorkUnit(unique_name, 0, 30), WorkUnit(unique_name, 1, 30), WorkUnit(unique_name, 2, 20)]

    copied = copy_together(stack.source, stack.target, units, {(unique_name, p): lambda: None for p in range(3)})

    assert set(copied) == {(unique_name, 0)}  # 1: the target holds a record; 2: the source ends past the snapshot
    assert_same_partition(stack, unique_name, 0)
    with ClusterAdmin(stack.target) as admin:
        assert admin.watermarks_of([(unique_name, 1), (unique_name, 2)]) == {(unique_name, 1): (0, 1),
                                                                            (unique_name, 2): (0, 0)}


def test_a_tasks_leases_are_taken_renewed_and_released_together(stack, unique_name):
    held = [PartitionLease(stack.target, "run-leases", unique_name, p, lease_s=1.0) for p in range(3)]
    rival = PartitionLease(stack.target, "run-rival", unique_name, 0, lease_s=1.0)
    warm = PartitionLease(stack.target, "run-leases", f"{unique_name}-warm", 0)  # the claims log's clients opened
    warm.acquire()
    warm.release()
    leases.acquire_all(held)
    try:
        assert all(lease.held() for lease in held)
        assert len({id(lease._renewer) for lease in held}) == 1  # one renewer for the three
        first = [lease._confirmed for lease in held]
        wait_until(lambda: all(lease._confirmed > f for lease, f in zip(held, first)),  # renewed, all three at once
                   "the leases to be renewed", timeout_s=10, poll_s=0.05)
        assert all(lease.held() for lease in held)
        leases.acquire_all([rival])
        assert not rival.held()  # partition 0 is held and renewed: the rival's claim is void
    finally:
        leases.release_all(held)
    assert not any(lease.held() for lease in held)
    state = claim_log(stack.target).current()
    assert not any(f"{unique_name}:{p}" in state.parts for p in range(3))
    rival.acquire(wait_s=5)  # free at once after the release
    rival.release()
