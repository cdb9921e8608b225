"""The copier's own scenarios on a source and a target: plain records, a log start above zero, a
compacted topic and transactions with aborts, each ending with every offset and record equal. They
run on the default stack (tests/integration/test_copier.py) and on older sources
(tests/dags/test_compat_migration.py); `source_untouched(topic)` records a source topic's watermarks
and asserts afterwards that they did not move."""
from __future__ import annotations

import contextlib
import gc
import itertools
import os
import time

from confluent_kafka import Producer
from kmigrate.claims import log as claims_log
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka import pool, records
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support.kafka import all_watermarks, create_topic, produce, records_of, seed_plain
from tests.support.migration import assert_same_partition
from tests.support.waiting import wait_until


def copy_topic(stack, topic, mode="preserve", options=CopyOptions()):
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, topic)
        ends = [source.watermarks(topic, p)[1] for p in range(source.require_partition_count(topic))]
    return [copy_partition(stack.source, stack.target, WorkUnit(topic, p, end, mode), options)
            for p, end in enumerate(ends)]


def rdkafka_clients() -> set[str]:
    """This process's librdkafka clients: the thread id of each one's main thread (named rdk:main).
    Not its broker threads (rdk:broker...): a client that an earlier test of this process left behind
    with its cluster stopped starts new ones each time it bootstraps again."""
    threads = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as comm:
            if comm.read().strip() == "rdk:main":
                threads.add(tid)
    return threads


@contextlib.contextmanager
def leaves_no_client_running():
    """Asserts that the block, run with the garbage collector off, leaves no librdkafka client running
    but the process's pooled admin clients and record readers (one a cluster, reused from partition
    to partition) and its claims log clients: the copier closes the clients it opened, where a
    reference cycle (a producer's callback refers to its writer) would keep them until a full
    collection. The pools are emptied first, so that what earlier tests of this process left in them
    does not count."""
    pool.admins.close_all()
    records.readers.close_all()
    claims_log.close_all()
    gc.collect()
    before = rdkafka_clients()
    gc.disable()
    try:
        yield
        pooled, readers = pool.admins.idle(), records.readers.idle()
        pool.admins.close_all()
        records.readers.close_all()
        claims_log.close_all()  # the claims log's reader and writer, kept per process like the pool
        left = rdkafka_clients() - before
    finally:
        gc.enable()
    assert pooled <= 2, f"{pooled} admin clients pooled for two clusters"
    assert readers <= 2, f"{readers} record readers pooled for two clusters"
    assert not left, f"{len(left)} librdkafka clients still running after the copy"


def plain_topic_keeps_offsets_and_content(stack, unique_name, source_untouched):
    """3 partitions of 3,000 plain records (keys, values and headers, some null) copied whole; a re-run is a no-op."""
    seed_plain(stack.source, unique_name, partitions=3, per_partition=3000)
    source_untouched(unique_name)
    with leaves_no_client_running():
        results = copy_topic(stack, unique_name)
    for result in results:
        assert result.records == 3000 and result.fillers == 0 and result.markers == 0
        assert result.whole_batches > 0
        assert result.digests_equal and result.source_digest == result.target_digest
        assert result.offset_map[0].source_start == result.offset_map[0].target_start == 0
        assert_same_partition(stack, unique_name, result.partition)

    again = copy_topic(stack, unique_name)  # a re-run is a no-op
    assert [r.records for r in again] == [0, 0, 0]
    assert all(r.digests_equal for r in again)


def log_start_above_zero_is_aligned(stack, unique_name, source_untouched, fast_alignment, cleanup):
    """A log start at 400 (DeleteRecords): the target is aligned to it with 400 fillers, then the 600 records."""
    create_topic(stack.source, unique_name, config={"cleanup.policy": cleanup})
    produce(stack.source, unique_name, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(1000)])
    with ClusterAdmin(stack.source) as admin:
        assert admin.delete_records(unique_name, 0, 400) == 400
    source_untouched(unique_name)
    [result] = copy_topic(stack, unique_name, options=CopyOptions(fast_alignment=fast_alignment))
    assert all_watermarks(stack.target, unique_name) == [(400, 1000)]
    assert result.fillers == 400 and result.records == 600 and result.digests_equal
    assert_same_partition(stack, unique_name, 0)


def compacted_topic_keeps_offsets_and_visible_records(stack, unique_name, source_untouched):
    """A compacted topic the cleaner has worked on (gaps, tombstones): the gaps kept as invisible offsets."""
    create_topic(stack.source, unique_name, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"})
    # Overwrite 20 keys again and again, deleting some, until the cleaner has compacted the source.
    began, rounds = time.monotonic(), itertools.count()

    def compacted() -> bool:
        round_ = next(rounds)
        records = [(f"key-{k}".encode(), None if (k % 7 == 0 and round_ % 2) else f"r{round_}-{k}".encode())
                   for k in range(20)]
        produce(stack.source, unique_name, records)
        with ClusterAdmin(stack.source) as admin:
            _, end = admin.watermarks(unique_name, 0)
        visible = [r[0] for r in records_of(stack.source, unique_name, 0)]
        return len(visible) < end - 40  # compaction removed overwritten records: gaps in the offsets

    # a round every 0.2 s: the segment rolls (segment.ms) before the next round
    wait_until(compacted, "the cleaner to compact the source", timeout_s=90, poll_s=0.2)
    # The cleaner keeps going for a while: copy once the visible records have stopped changing
    # (three looks, each after more than the cleaner's 1 s backoff).
    looks: dict = {"stable": 0, "last": None}

    def settled() -> bool:
        current = [r[:2] for r in records_of(stack.source, unique_name, 0)]
        looks["stable"] = looks["stable"] + 1 if current == looks["last"] else 0
        looks["last"] = current
        return looks["stable"] >= 3

    wait_until(settled, "the source's compaction to settle", timeout_s=began + 150 - time.monotonic(), poll_s=1.2)
    source_untouched(unique_name)
    [result] = copy_topic(stack, unique_name)
    assert result.markers > 0 and result.digests_equal
    assert_same_partition(stack, unique_name, 0)


def transactional_topic_keeps_offsets_and_visibility(stack, unique_name, source_untouched, raw_batches):
    """Committed and aborted transactions between plain records: every marker, filler and visible record where
    the source has it, the whole batches only where no transaction follows."""
    create_topic(stack.source, unique_name)
    plain = Producer(stack.source.producer(**{"enable.idempotence": True}))
    txn = Producer(stack.source.producer(**{"transactional.id": f"{unique_name}-seed"}))
    txn.init_transactions(30)
    end = 0

    def plain_records(n, tag):
        nonlocal end
        for i in range(n):
            plain.produce(unique_name, key=f"{tag}-{i}".encode(), value=b"plain", partition=0)
        plain.flush(30)
        end += n

    def transaction(n, tag, commit):
        nonlocal end
        txn.begin_transaction()
        for i in range(n):
            txn.produce(unique_name, key=f"{tag}-{i}".encode(), value=b"txn", partition=0)
        txn.flush(30)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
        end += n + 1
        with ClusterAdmin(stack.source) as admin:  # the marker lands after commit/abort returns
            admin.wait_for_end(unique_name, 0, end)

    plain_records(5, "a")                  # 0-4
    transaction(3, "b", commit=True)       # 5-7, commit marker 8
    plain_records(2, "d")                  # 9-10: gap of 1 at 8 -> b7 rewritten in a committed transaction
    transaction(4, "c", commit=False)      # 11-14 aborted, marker 15
    transaction(1, "e", commit=True)       # 16, marker 17: gap 11..15 (5) -> 4 aborted fillers + abort marker
    transaction(1, "f", commit=False)      # 18 aborted, marker 19: gap 17..19 (3) -> 2 fillers + abort
    transaction(2, "g", commit=True)       # 20-21, marker 22
    plain_records(3, "h")                  # 23-25: gap of 1 at 22 -> g21 committed; h can go whole (j follows)
    plain_records(3, "j")                  # 26-28: a plain batch between plain batches
    plain_records(3, "k")                  # 29-31: followed by an aborted transaction -> record by record
    transaction(2, "i", commit=False)      # 32-33 aborted, marker 34: trailing gap of 3 -> 2 fillers + abort
    source_untouched(unique_name)

    with leaves_no_client_running():  # both producers, the record path's consumer
        [result] = copy_topic(stack, unique_name, options=CopyOptions(raw_batches=raw_batches))
    assert result.digests_equal
    assert (result.markers, result.fillers, result.records) == (5, 8, 22)
    assert result.whole_batches == (2 if raw_batches else 0)  # h and j
    assert_same_partition(stack, unique_name, 0)
    visible = records_of(stack.target, unique_name, 0)
    assert [offset for offset, *_ in visible] == [0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 16, 20, 21, *range(23, 32)]
    assert [k.decode().split("-")[0] for _, k, *_ in visible] == list("aaaaabbbddegghhhjjjkkk")
