"""Verification by whole batches on the local stack: what it settles, where it hands over to the
record path, and that a target that is not a copy is never found equal."""
from __future__ import annotations

import time

from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.verify import batches as batch_verify
from kmigrate.run.verify.partition import verify_live
from kmigrate.run.targets.prepare import prepare_target_topic
from kmigrate.run.copying.tasks import verify_bin

from tests.support.kafka import TxnSeeder, create_topic, produce


def test_plain_batches_are_settled_whole_and_a_transaction_is_read_record_by_record(stack, unique_name,
                                                                                   source_untouched):
    plain, mixed = f"{unique_name}-plain", f"{unique_name}-mixed"
    for topic in (plain, mixed):
        create_topic(stack.source, topic, partitions=2)
    for p in range(2):
        produce(stack.source, plain, [(b"k%d" % i, b"v%d" % i * 20) for i in range(300)], partition=p)
    seed = TxnSeeder(stack.source, mixed)
    seed.records(50, "a")                  # 0-49, a plain batch copied whole
    seed.records(50, "b")                  # 50-99: followed by a transaction, copied record by record
    seed.transaction(5, "c", commit=True)  # 100-104, marker 105
    seed.records(20, "d")                  # 106-125
    source_untouched(plain)
    source_untouched(mixed)
    units = [WorkUnit(plain, 0, 300), WorkUnit(plain, 1, 300), WorkUnit(mixed, 0, seed.end)]
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        for topic in (plain, mixed):
            prepare_target_topic(source, target, topic)
    for unit in units:
        assert copy_partition(stack.source, stack.target, unit, CopyOptions(verify=False)).whole_batches

    prefixes = batch_verify.compare(stack.source, stack.target, {(u.topic, u.partition): (0, u.end_offset)
                                                                 for u in units})
    assert [(prefixes[(plain, p)].end, prefixes[(plain, p)].records) for p in range(2)] == [(300, 300), (300, 300)]
    assert prefixes[(mixed, 0)].end == 50  # where the record path takes over

    rows = verify_bin([(u, {}) for u in units], (stack.source, stack.target))
    assert all(r["equal"] and r["source_digest"] == r["target_digest"] for r in rows), rows
    assert [r["records"] for r in rows] == [300, 300, 125]  # every visible record, the marker not counted


def test_a_target_holding_other_records_at_the_same_offsets_differs(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name)
    create_topic(stack.target, unique_name)
    produce(stack.source, unique_name, [(b"k%d" % i, b"source %d" % i) for i in range(100)])
    produce(stack.target, unique_name, [(b"k%d" % i, b"target %d" % i) for i in range(100)])
    source_untouched(unique_name)
    unit = WorkUnit(unique_name, 0, 100)

    prefix = batch_verify.compare(stack.source, stack.target, {(unique_name, 0): (0, 100)})[(unique_name, 0)]
    assert prefix.end == 0 and prefix.records == 0
    [row] = verify_bin([(unit, {})], (stack.source, stack.target))
    assert not row["equal"] and "content differs in [0, 100)" in row["problems"][0]


def test_the_live_verification_settles_whole_batches_and_reads_its_seam_record_by_record(stack, unique_name,
                                                                                       source_untouched):
    create_topic(stack.source, unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    produce(stack.source, unique_name, [(b"k%d" % i, b"first %d" % i) for i in range(200)])
    assert copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 200), CopyOptions(verify=False)).whole_batches

    first = verify_live(stack.source, stack.target, WorkUnit(unique_name, 0, 200))
    assert first["equal"] and (first["records"], first["by_batch"], first["read_from"]) == (200, 200, 0), first

    produce(stack.source, unique_name, [(b"k%d" % i, b"second %d" % i) for i in range(100)])
    source_untouched(unique_name)
    copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 300), CopyOptions(verify=False))
    second = verify_live(stack.source, stack.target, WorkUnit(unique_name, 0, 300), previous=first)
    # the last BOUNDARY_OFFSETS of the first read again record by record, what came after settled whole
    assert second["equal"] and (second["records"], second["by_batch"], second["read_from"]) == (300, 100, 100), second


def test_a_live_verification_finds_other_records_after_the_equal_batches(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    produce(stack.source, unique_name, [(b"k%d" % i, b"copied %d" % i) for i in range(100)])
    copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 100), CopyOptions(verify=False))
    produce(stack.source, unique_name, [(b"k%d" % i, b"source %d" % i) for i in range(50)])
    produce(stack.target, unique_name, [(b"k%d" % i, b"target %d" % i) for i in range(50)])
    source_untouched(unique_name)

    row = verify_live(stack.source, stack.target, WorkUnit(unique_name, 0, 150))
    assert not row["equal"] and row["by_batch"] == 100, row
    assert "content differs in [100, 150)" in row["problems"][0]


def test_a_paced_comparison_reads_no_faster_than_asked_and_finds_the_same(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    produce(stack.source, unique_name, [(b"k%d" % i, bytes(1024)) for i in range(3000)])  # three 1 MiB fetches
    source_untouched(unique_name)
    copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 3000), CopyOptions(verify=False))
    window = {(unique_name, 0): (0, 3000)}

    began = time.monotonic()
    fast = batch_verify.compare(stack.source, stack.target, window)[(unique_name, 0)]
    unpaced_s = time.monotonic() - began
    began = time.monotonic()
    paced = batch_verify.compare(stack.source, stack.target, window, bytes_per_s=4 << 20)[(unique_name, 0)]
    # the third round is sent once the first two (1 MiB a side each) are paid for at 4 MiB/s
    assert time.monotonic() - began >= 1.0 > unpaced_s
    assert (paced.end, paced.records, paced.content_hash.digest()) == (fast.end, fast.records, fast.content_hash.digest())
    assert paced.end == 3000
