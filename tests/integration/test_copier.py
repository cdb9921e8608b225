"""The offset-preserving copier against the real local clusters (docs/DESIGN.md §4)."""
from __future__ import annotations

import random
import signal
import subprocess
import sys

import pytest
from confluent_kafka import Producer
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import ForeignTarget, OffsetMismatch, TargetDiverged, TopicMismatch
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.offsets import translate_offset
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support import copier
from tests.support.copier import copy_topic
from tests.support.kafka import all_watermarks, create_topic, produce, records_of, seed_plain
from tests.support.migration import assert_same_partition
from tests.support.stack import PROJECT_DIR


def test_plain_topic_keeps_offsets_and_content(stack, unique_name, source_untouched):
    copier.plain_topic_keeps_offsets_and_content(stack, unique_name, source_untouched)


@pytest.mark.parametrize("fast_alignment", [True, False], ids=["record-batches", "producer"])
@pytest.mark.parametrize("cleanup", ["delete", "compact,delete"])
def test_log_start_above_zero_is_aligned(stack, unique_name, source_untouched, fast_alignment, cleanup):
    copier.log_start_above_zero_is_aligned(stack, unique_name, source_untouched, fast_alignment, cleanup)


def test_compacted_topic_keeps_offsets_and_visible_records(stack, unique_name, source_untouched):
    copier.compacted_topic_keeps_offsets_and_visible_records(stack, unique_name, source_untouched)


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_transactional_topic_keeps_offsets_and_visibility(stack, unique_name, source_untouched, raw_batches):
    copier.transactional_topic_keeps_offsets_and_visibility(stack, unique_name, source_untouched, raw_batches)


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
