"""Compacted partitions whose source cleaner removes records after they were copied: the digests
then differ, the record-by-record comparison (`records.compacted_differences`) finds nothing wrong
and still reports a record only the target holds that no cleaner would remove; a partition verified
while live, cleaned further on the source, then copied and verified at the cutover raises no false
alarm (and the plain digest comparison shows what the alarm would have been)."""
from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import (
    compacted_differences,
    compacted_differences_of,
    partition_digest,
)
from kmigrate.model import PRESERVE, WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic, prepare_targets
from kmigrate.run.verify.partition import verify_live, verify_partition

from tests.support.kafka import create_topic, produce, records_of
from tests.support.waiting import wait_until

# the cleaner acts as soon as a segment is rolled; the broker checks for work every second
# (log.cleaner.backoff.ms in stack/stack.py)
FAST_CLEANER = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",
}
UPDATED = [b"k0", b"k1", b"k2", b"k3"]


def produce_at(cluster, topic: str, records: Iterable[tuple[bytes, bytes | None]], timestamp: int) -> list[int]:
    """Produce (key, value) pairs with one explicit timestamp; returns their offsets. Segments roll
    by record timestamps (segment.ms), so records of one timestamp stay in one segment and a later
    timestamp rolls it, whatever the wall clock does."""
    offsets: list[int] = []
    producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 5}))
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=0, timestamp=timestamp,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()) if err is None else None)
    assert producer.flush(30) == 0
    assert len(offsets) == len(records)
    return sorted(offsets)


def delete_topic(cluster, topic: str) -> None:
    admin = AdminClient(cluster.admin())  # kept referenced: the futures fail once it is destroyed
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(timeout=30)


def test_records_the_source_cleaned_after_the_copy_are_no_difference(stack, unique_name):
    topic = unique_name
    base = int(time.time() * 1000) - 60_000
    create_topic(stack.source, topic, config=FAST_CLEANER)
    try:
        first = [(key, f"{key.decode()}-{i}".encode()) for i in range(3) for key in UPDATED]
        first += [(b"stay", b"stay-0"), (b"stay", b"stay-1"),  # superseded inside the copied range
                  (b"gone", b"gone-0"), (b"gone", None)]       # deleted: a tombstone, last in the range
        offsets = produce_at(stack.source, topic, first, base)
        copied_end = offsets[-1] + 1
        assert offsets == list(range(copied_end))

        with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
            prepare_target_topic(source, target, topic)
        result = copy_partition(stack.source, stack.target, WorkUnit(topic, 0, copied_end))
        assert result.records == copied_end and result.digests_equal  # nothing was cleaned before the copy

        # every key of the range but stay and gone written again after it (k0 twice, so that the
        # source's cleaner also empties offset copied_end), then a record that rolls that segment
        later = [(b"k0", b"k0-u0")] + [(key, key + b"-u1") for key in UPDATED]
        produce_at(stack.source, topic, later, base + 1_000)
        produce_at(stack.source, topic, [(b"roll", b"0")], base + 2_000)
        # the target gets a record no cleaner removes, at offset copied_end
        assert produce_at(stack.target, topic, [(b"intruder", b"x")], base) == [copied_end]

        # until the cleaner left only stay's last record in the range: a first cleaning removes the
        # superseded records and marks the tombstone, a later one (of newly rolled records) removes it
        survivor = offsets[first.index((b"stay", b"stay-1"))]
        rolls = itertools.count(3)

        def cleaned() -> bool:
            if [r[0] for r in records_of(stack.source, topic, 0, 0, copied_end + 1)] == [survivor]:
                return True
            roll = next(rolls)
            produce_at(stack.source, topic, [(b"roll", str(roll).encode())], base + roll * 1_000)
            return False

        # a record that rolls the segment every 0.2 s until then
        wait_until(cleaned, f"the source's cleaner to leave only offset {survivor} in [0, {copied_end}]",
                   timeout_s=90, poll_s=0.2)

        source_digest = partition_digest(stack.source, topic, 0, 0, copied_end)
        target_digest = partition_digest(stack.target, topic, 0, 0, copied_end)
        assert source_digest.hexdigest() != target_digest.hexdigest()
        assert target_digest.records == copied_end
        assert source_digest.records == 1

        assert compacted_differences(stack.source, stack.target, topic, 0, 0, copied_end) == (1, [])

        # the last k0..k3 of the range were cleaned because of the records written after it: without
        # those, they would look like records only the target holds
        alone = compacted_differences_of(iter(records_of(stack.source, topic, 0, 0, copied_end)),
                                         lambda: iter(records_of(stack.target, topic, 0, 0, copied_end)))[1]
        last_updated = [offset for offset, (key, _) in enumerate(first) if key in UPDATED][-len(UPDATED):]
        assert [p.split(":")[0] for p in alone] == [f"offset {o}" for o in last_updated]

        compared, problems = compacted_differences(stack.source, stack.target, topic, 0, 0, copied_end + 1)
        assert compared == 1
        assert len(problems) == 1
        assert problems[0].startswith(f"offset {copied_end}: key b'intruder' on the target only, not superseded")
    finally:
        for cluster in (stack.source, stack.target):
            delete_topic(cluster, topic)


def test_records_the_targets_cleaner_removed_for_records_copied_after_the_range_are_no_difference(stack, unique_name):
    # a mirror copies on while it verifies a live range: the target may hold later records of a key
    # past the range, and its cleaner remove the range's record before the source's cleaner does
    topic = unique_name
    base = int(time.time() * 1000) - 60_000
    create_topic(stack.source, topic, config={"cleanup.policy": "compact"})  # a week's segment: never cleaned here
    create_topic(stack.target, topic, config=FAST_CLEANER)
    try:
        offsets = produce_at(stack.source, topic, [(key, b"0") for key in UPDATED] + [(b"stay", b"0")], base)
        end = offsets[-1] + 1
        assert copy_partition(stack.source, stack.target, WorkUnit(topic, 0, end)).records == end
        produce_at(stack.source, topic, [(key, b"1") for key in UPDATED], base + 1_000)
        rolls = itertools.count(2)

        def cleaned_on_the_target() -> bool:
            if [r[0] for r in records_of(stack.target, topic, 0, 0, end)] == [end - 1]:
                return True
            produce_at(stack.source, topic, [(b"roll", b"x")], base + next(rolls) * 1_000)
            with ClusterAdmin(stack.source) as admin:
                high = admin.watermarks(topic, 0)[1]
            copy_partition(stack.source, stack.target, WorkUnit(topic, 0, high))
            return False

        wait_until(cleaned_on_the_target, f"the target's cleaner to leave only offset {end - 1} in [0, {end})",
                   timeout_s=90, poll_s=0.2)
        assert visible(stack.source, topic, end) == end  # the source still holds every record of the range

        assert compacted_differences(stack.source, stack.target, topic, 0, 0, end) == (end, [])
        # without the target's records past the range, the removed ones would look missing
        alone = compacted_differences_of(iter(records_of(stack.source, topic, 0, 0, end)),
                                         lambda: iter(records_of(stack.target, topic, 0, 0, end)))[1]
        assert alone == [f"offset {o}: on the source, missing on the target" for o in offsets[:-1]]
    finally:
        for cluster in (stack.source, stack.target):
            delete_topic(cluster, topic)


def visible(cluster, topic: str, end: int) -> int:
    return partition_digest(cluster, topic, 0, 0, end).records


def test_a_partition_cleaned_after_its_live_verification_verifies_equal_at_the_cutover(stack):
    topic = f"compacted{uuid.uuid4().hex[:6]}"
    # tombstones kept a day, as by default: with FAST_CLEANER's 100 ms the cleaner may remove the
    # tombstone of key-5 before the cutover copy reads it, and the target then keeps key-5's older
    # value, which the verification rightly reports
    create_topic(stack.source, topic, 1, {**FAST_CLEANER, "delete.retention.ms": "86400000"})
    try:
        cleaned_between_pre_copy_and_cutover(stack, topic)
    finally:
        for cluster in (stack.source, stack.target):
            delete_topic(cluster, topic)


def cleaned_between_pre_copy_and_cutover(stack, topic: str) -> None:
    keys = [f"key-{k}".encode() for k in range(20)]
    produce(stack.source, topic, [(keys[i % 20], f"v{i}".encode()) for i in range(200)])
    with ClusterAdmin(stack.source) as admin:
        first_end = admin.watermarks(topic, 0)[1]
    unit = WorkUnit(topic, 0, first_end, PRESERVE)
    prepare_targets(stack.source, stack.target, [unit])
    with ClusterAdmin(stack.target) as admin:  # the target keeps what it got: only the source cleans
        admin.alter_topic_configs(topic, {"segment.ms": "86400000", "min.compaction.lag.ms": "86400000"})
    copy_partition(stack.source, stack.target, unit, CopyOptions(verify=False))
    live = verify_live(stack.source, stack.target, unit, compacted=True)
    assert live["equal"] and live["to"] == first_end, live

    # newer values of every key (and a tombstone): the source's cleaner removes copied records. (Not
    # the first record after the pre-copied end: a single removed offset right at a resume point is
    # one the copier cannot keep invisible, and refuses; docs/DESIGN.md §3.1)
    produce(stack.source, topic, [(key, b"newer") for key in keys] + [(keys[5], None)])
    copied = visible(stack.target, topic, first_end)

    def cleaned() -> bool:
        if visible(stack.source, topic, first_end) < copied:
            return True
        produce(stack.source, topic, [(b"roll", b"a record to roll the active segment")])
        return False

    # a record that rolls the active segment every 0.5 s until then
    wait_until(cleaned, "the source's cleaner to remove a copied record", timeout_s=90, poll_s=0.5)
    with ClusterAdmin(stack.source) as admin:
        cutover_end = admin.watermarks(topic, 0)[1]
    final = WorkUnit(topic, 0, cutover_end, PRESERVE)
    copy_partition(stack.source, stack.target, final, CopyOptions(verify=False))

    for row in (verify_partition(stack.source, stack.target, final, live=live, compacted=True),
                verify_partition(stack.source, stack.target, final, compacted=True)):
        assert row["equal"], row["problems"]
        assert row["verified_in_window"][1] == cutover_end
    windowed = verify_partition(stack.source, stack.target, final, live=live, compacted=True)
    assert windowed["verified_live"][:2] == [0, first_end] and windowed["verified_in_window"][0] == first_end - 100
    in_full = verify_partition(stack.source, stack.target, final, compacted=True)
    assert "the source's cleaner removed after they were copied" in in_full["note"]
    # compared as a plain topic, the records the cleaner removed would be an alarm
    plain = verify_partition(stack.source, stack.target, final, compacted=False)
    assert not plain["equal"] and "content differs" in plain["problems"][0]
