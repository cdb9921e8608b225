"""The offset-preserving copier against the real local clusters (docs/DESIGN.md §4)."""
from __future__ import annotations

import contextlib
import gc
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer
from kmigrate import claims
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ForeignTarget, OffsetMismatch, TargetDiverged, TopicMismatch
from kmigrate.kafka import pool, records
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.kafka.records import read_range, timestamp_of
from kmigrate.model import WorkUnit
from kmigrate.offsets import translate_offset
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.conftest import PROJECT_DIR
from tests.kafka_helpers import all_watermarks, create_topic, produce


def records_of(cluster, topic, partition, start=0, end=None):
    """(offset, key, value, headers, timestamp) of every read_committed-visible record."""
    if end is None:
        with ClusterAdmin(cluster) as admin:
            start_, end = admin.watermarks(topic, partition)
            start = max(start, start_)
    return [(m.offset(), m.key(), m.value(), m.headers(), timestamp_of(m))
            for m in read_range(cluster, topic, partition, start, end)]


def copy_topic(stack, topic, mode="preserve", options=CopyOptions()):
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, topic)
        ends = [source.watermarks(topic, p)[1] for p in range(source.require_partition_count(topic))]
    return [copy_partition(stack.source, stack.target, WorkUnit(topic, p, end, mode), options)
            for p, end in enumerate(ends)]


def assert_same_partition(stack, topic, partition):
    source_marks = all_watermarks(stack.source, topic)[partition]
    assert all_watermarks(stack.target, topic)[partition] == source_marks
    assert records_of(stack.target, topic, partition) == records_of(stack.source, topic, partition)


def rdkafka_threads() -> set[str]:
    """This process's librdkafka threads (named rdk:...), by thread id."""
    threads = set()
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as comm:
            if comm.read().startswith("rdk:"):
                threads.add(tid)
    return threads


@contextlib.contextmanager
def leaves_no_client_running():
    """Asserts that the block, run with the garbage collector off, leaves no librdkafka client's
    threads behind but the process's pooled admin clients and record readers (one a cluster,
    reused from partition to partition) and its claims log clients: the copier closes the clients it opened, where a reference cycle (a
    producer's callback refers to its writer) would keep them until a full collection."""
    gc.collect()
    before = rdkafka_threads()
    gc.disable()
    try:
        yield
        pooled, readers = pool.admins.idle(), records.readers.idle()
        pool.admins.close_all()
        records.readers.close_all()
        claims.close_all()  # the claims log's reader and writer, kept per process like the pool
        left = rdkafka_threads() - before
    finally:
        gc.enable()
    assert pooled <= 2, f"{pooled} admin clients pooled for two clusters"
    assert readers <= 2, f"{readers} record readers pooled for two clusters"
    assert not left, f"{len(left)} librdkafka threads still running after the copy"


def seed_plain(cluster, topic, partitions, per_partition, **producer_settings):
    # distinct, recent timestamps: older than the broker's 7-day retention would be deleted by it
    first_timestamp = int(time.time() * 1000) - per_partition * 10
    create_topic(cluster, topic, partitions)
    producer = Producer(cluster.producer(**{"enable.idempotence": True, "linger.ms": 5, **producer_settings}))
    for p in range(partitions):
        for i in range(per_partition):
            key = None if i % 50 == 7 else f"key-{p}-{i}".encode()
            value = None if i % 50 == 13 else (f"value-{p}-{i}-" + "x" * (i % 200)).encode()
            headers = [("h", f"{i}".encode()), ("empty", b""), ("null", None)] if i % 3 == 0 else None
            producer.produce(topic, key=key, value=value, partition=p, headers=headers,
                             timestamp=first_timestamp + i * 10)
            producer.poll(0)
    assert producer.flush(30) == 0


def test_plain_topic_keeps_offsets_and_content(stack, unique_name, source_untouched):
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


@pytest.mark.parametrize("fast_alignment", [True, False], ids=["record-batches", "producer"])
@pytest.mark.parametrize("cleanup", ["delete", "compact,delete"])
def test_log_start_above_zero_is_aligned(stack, unique_name, source_untouched, fast_alignment, cleanup):
    create_topic(stack.source, unique_name, config={"cleanup.policy": cleanup})
    produce(stack.source, unique_name, [(f"k{i}".encode(), f"v{i}".encode()) for i in range(1000)])
    with ClusterAdmin(stack.source) as admin:
        assert admin.delete_records(unique_name, 0, 400) == 400
    source_untouched(unique_name)
    [result] = copy_topic(stack, unique_name, options=CopyOptions(fast_alignment=fast_alignment))
    assert all_watermarks(stack.target, unique_name) == [(400, 1000)]
    assert result.fillers == 400 and result.records == 600 and result.digests_equal
    assert_same_partition(stack, unique_name, 0)


def test_compacted_topic_keeps_offsets_and_visible_records(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name, config={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"})
    # Overwrite 20 keys again and again, deleting some, until the cleaner has compacted the source.
    deadline = time.monotonic() + 90
    round_ = 0
    while True:
        records = [(f"key-{k}".encode(), None if (k % 7 == 0 and round_ % 2) else f"r{round_}-{k}".encode())
                   for k in range(20)]
        produce(stack.source, unique_name, records)
        round_ += 1
        with ClusterAdmin(stack.source) as admin:
            _, end = admin.watermarks(unique_name, 0)
        visible = [r[0] for r in records_of(stack.source, unique_name, 0)]
        if len(visible) < end - 40:  # compaction removed overwritten records: gaps in the offsets
            break
        assert time.monotonic() < deadline, "the source was not compacted within 90s"
        time.sleep(0.2)  # give the segment time to roll (segment.ms) before the next round
    # The cleaner keeps going for a while: copy once the visible records have stopped changing
    # (three looks, each after more than the cleaner's 1 s backoff).
    stable, last = 0, None
    while stable < 3:
        current = [r[:2] for r in records_of(stack.source, unique_name, 0)]
        stable = stable + 1 if current == last else 0
        last = current
        assert time.monotonic() < deadline + 60, "the source's compaction did not settle"
        time.sleep(1.2)
    source_untouched(unique_name)
    [result] = copy_topic(stack, unique_name)
    assert result.markers > 0 and result.digests_equal
    assert_same_partition(stack, unique_name, 0)


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_transactional_topic_keeps_offsets_and_visibility(stack, unique_name, source_untouched, raw_batches):
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


KILL_SCRIPT = """
import os, signal, sys
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.model import WorkUnit
topic, end, kill_after, raw = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "raw"
def hook(records):
    if records >= kill_after:
        os.kill(os.getpid(), signal.SIGKILL)
copy_partition(ClusterConfig.from_bootstrap("source", "localhost:19092"),
               ClusterConfig.from_bootstrap("target", "localhost:29092"),
               WorkUnit(topic, 0, end), CopyOptions(progress_hook=hook, verify=False, raw_batches=raw,
                                                    fetch_max_bytes=256 * 1024))
"""


@pytest.mark.parametrize("path", ["raw", "records"])
@pytest.mark.parametrize("kill_after", [1, 20_000, 45_000])
def test_copy_killed_mid_partition_resumes_without_duplicates(stack, unique_name, source_untouched, kill_after, path):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=60_000)
    source_untouched(unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    killed = subprocess.run([sys.executable, "-c", KILL_SCRIPT, unique_name, "60000", str(kill_after), path],
                            cwd=PROJECT_DIR, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    _, partial_end = all_watermarks(stack.target, unique_name)[0]
    assert 0 <= partial_end < 60_000
    print(f"killed after {kill_after} records handed over: target end {partial_end}")

    [result] = copy_topic(stack, unique_name)
    assert result.target_start == partial_end
    assert result.records == 60_000 - partial_end
    assert result.digests_equal
    assert_same_partition(stack, unique_name, 0)


@pytest.mark.parametrize("mode", ["preserve", "translate"])
def test_incompressible_records_fill_batches_the_target_accepts(stack, unique_name, source_untouched, mode):
    # 4,000 records of 512 random bytes (2 MB) through the record path: a producer batch filled to the
    # topic's max.message.bytes grows under lz4 and was refused whole, 2,104 records at a time
    create_topic(stack.source, unique_name, 1)
    rng = random.Random(3)
    producer = Producer(stack.source.producer(**{"linger.ms": 20}))
    for i in range(4000):
        producer.produce(unique_name, key=b"k%d" % i, value=rng.randbytes(512), partition=0)
    assert producer.flush(30) == 0
    source_untouched(unique_name)
    [result] = copy_topic(stack, unique_name, mode, CopyOptions(raw_batches=False))
    assert result.records == 4000 and result.digests_equal is not False
    assert records_of(stack.target, unique_name, 0) == records_of(stack.source, unique_name, 0)


def test_racing_writer_on_target_is_detected(stack, unique_name, source_untouched):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=30_000)
    source_untouched(unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    racer = Producer(stack.target.producer())

    def race(_records):
        racer.produce(unique_name, key=b"racer", value=b"not from the source", partition=0)
        racer.flush(10)

    with pytest.raises(OffsetMismatch, match=rf"{unique_name}\[0\]: record expected at target offset \d+ landed at"):
        copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 30_000),
                       CopyOptions(progress_hook=race, check_every=1000))


def test_target_with_foreign_data_is_refused_unchanged(stack, unique_name, source_untouched):
    seed_plain(stack.source, unique_name, partitions=1, per_partition=100)
    source_untouched(unique_name)
    create_topic(stack.target, unique_name, config={"message.timestamp.type": "CreateTime"})
    produce(stack.target, unique_name, [(b"someone", b"else")] * 10)
    before = records_of(stack.target, unique_name, 0)
    with pytest.raises(TargetDiverged, match=rf"{unique_name}\[0\].*differ from the source's.*Nothing was written"):
        copy_topic(stack, unique_name)
    assert records_of(stack.target, unique_name, 0) == before
    assert all_watermarks(stack.target, unique_name) == [(0, 10)]

    # more records on the target than the source has: refused the same way
    produce(stack.target, unique_name, [(b"someone", b"else")] * 200)
    with pytest.raises(ForeignTarget, match="beyond the snapshot end"):
        copy_topic(stack, unique_name)
    assert all_watermarks(stack.target, unique_name) == [(0, 210)]


def test_target_with_fewer_partitions_is_refused_unchanged(stack, unique_name, source_untouched):
    seed_plain(stack.source, unique_name, partitions=3, per_partition=10)
    source_untouched(unique_name)
    create_topic(stack.target, unique_name, partitions=1)
    with pytest.raises(TopicMismatch, match=rf"'{unique_name}' has 1 partitions, the source has 3.*--partitions 3"):
        copy_topic(stack, unique_name)
    assert all_watermarks(stack.target, unique_name) == [(0, 0)]


def test_record_larger_than_the_target_allows_is_refused_unchanged(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name, config={"max.message.bytes": str(3 * 1024 * 1024)})
    big = Producer(stack.source.producer(**{"message.max.bytes": 4 * 1024 * 1024}))
    big.produce(unique_name, key=b"big", value=b"x" * (2 * 1024 * 1024), partition=0)
    assert big.flush(30) == 0
    source_untouched(unique_name)
    create_topic(stack.target, unique_name, config={"message.timestamp.type": "CreateTime"})  # broker default: 1 MiB
    with pytest.raises(TopicMismatch, match=r"max.message.bytes='1048588' \(source has '3145728'\)"):
        copy_topic(stack, unique_name)
    assert all_watermarks(stack.target, unique_name) == [(0, 0)]


def test_translate_mode_records_an_exact_offset_map(stack, unique_name, source_untouched):
    create_topic(stack.source, unique_name)
    txn = Producer(stack.source.producer(**{"transactional.id": f"{unique_name}-seed"}))
    txn.init_transactions(30)
    for n, commit in [(4, True), (3, False), (2, True), (5, False), (3, True)]:
        txn.begin_transaction()
        for i in range(n):
            txn.produce(unique_name, key=f"k{n}{i}".encode(), value=b"v", partition=0)
        txn.flush(30)
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
    with ClusterAdmin(stack.source) as admin:
        admin.wait_for_end(unique_name, 0, 4 + 1 + 3 + 1 + 2 + 1 + 5 + 1 + 3 + 1)
    source_untouched(unique_name)
    create_topic(stack.target, unique_name, config={"message.timestamp.type": "CreateTime"})
    produce(stack.target, unique_name, [(b"unrelated", b"prefix")] * 7)

    [result] = copy_topic(stack, unique_name, mode="translate")
    source = records_of(stack.source, unique_name, 0)
    target = {r[0]: r[1:] for r in records_of(stack.target, unique_name, 0)}
    assert result.records == len(source) == 9
    for offset, *content in source:
        assert target[translate_offset(result.offset_map, offset, result.target_end)] == tuple(content)
    # a committed offset past the last record maps to the target's end
    assert translate_offset(result.offset_map, source[-1][0] + 1, result.target_end) == result.target_end == 16

    # a re-run with the recorded map copies nothing; new source records continue the map exactly
    unit = WorkUnit(unique_name, 0, result.end_offset, "translate")
    again = copy_partition(stack.source, stack.target, unit, resume_map=result.offset_map)
    assert again.records == 0 and again.offset_map == result.offset_map and again.target_end == 16
    produce(stack.source, unique_name, [(b"later", b"v")] * 4)
    source_untouched(unique_name)  # the test's own seeding: the copier must not move it from here
    _, source_end = all_watermarks(stack.source, unique_name)[0]
    more = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, source_end, "translate"),
                          resume_map=again.offset_map)
    assert more.records == 4 and more.target_end == 20
    target = {r[0]: r[1:] for r in records_of(stack.target, unique_name, 0)}
    for offset, *content in records_of(stack.source, unique_name, 0):
        assert target[translate_offset(more.offset_map, offset, more.target_end)] == tuple(content)

    # a map that does not match the target is refused, nothing written
    with pytest.raises(TargetDiverged, match="offset map of the earlier runs ends at 16"):
        copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, source_end, "translate"),
                       resume_map=result.offset_map)
    assert all_watermarks(stack.target, unique_name)[0] == (0, 20)


def test_alignment_interrupted_between_filler_batches_is_finished_on_rerun(stack, unique_name, source_untouched):
    from kmigrate.copy import fastfill

    create_topic(stack.source, unique_name)
    produce(stack.source, unique_name, [(f"k{i}".encode(), b"v") for i in range(300)])
    with ClusterAdmin(stack.source) as admin:
        admin.delete_records(unique_name, 0, 250)
    source_untouched(unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    # the state a copier killed between two filler batches leaves behind (2 of 3 batches of 100)
    fastfill.write_fillers(stack.target, unique_name, 0, 0, 200, batch_records=100)
    assert all_watermarks(stack.target, unique_name) == [(0, 200)]

    [result] = copy_topic(stack, unique_name)
    assert result.fillers == 50 and result.records == 50 and result.digests_equal
    assert all_watermarks(stack.target, unique_name) == [(250, 300)]
