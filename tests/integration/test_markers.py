"""Lone transaction markers where the copier starts or stops (docs/DESIGN.md §4.4): a log start that
sits on a commit or abort marker, and a copy round that ends right before a marker. Each must
migrate with every offset, record and read_committed view equal, on both copy paths."""
from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions, marker_transactional_id
from kmigrate.errors import SourceNotReady
from kmigrate.kafka import leaders, txn_wire, wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support.kafka import TxnSeeder, all_watermarks, create_topic, records_of, seed_plain
from tests.support.migration import assert_same_partition
from tests.support.stack import PROJECT_DIR
from tests.support.waiting import wait_until


def copy_to(stack, topic: str, end: int, raw_batches: bool):
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, topic)
    return copy_partition(stack.source, stack.target, WorkUnit(topic, 0, end), CopyOptions(raw_batches=raw_batches))


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
@pytest.mark.parametrize("commit", [True, False], ids=["commit-marker", "abort-marker"])
def test_a_log_start_on_a_transaction_marker_is_migrated(stack, unique_name, source_untouched, commit, raw_batches):
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.transaction(3, "a", commit=True)           # 0-2, marker 3
    marker = seed.transaction(3, "b", commit=commit)  # 4-6, marker 7
    seed.transaction(3, "c", commit=True)           # 8-10, marker 11
    seed.records(3, "d")                             # 12-14
    with ClusterAdmin(stack.source) as admin:  # as Kafka Streams purges a repartition topic
        admin.delete_records(unique_name, 0, marker)
    source_untouched(unique_name)

    for _ in range(2):  # the second copy is a no-op that confirms
        result = copy_to(stack, unique_name, seed.end, raw_batches)
        assert result.digests_equal, result
    assert all_watermarks(stack.target, unique_name) == [(7, 15)]
    assert_same_partition(stack, unique_name, 0)
    assert [o for o, *_ in records_of(stack.target, unique_name, 0)] == [8, 9, 10, 12, 13, 14]


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_a_round_that_ends_before_a_lone_marker_writes_it_and_the_next_round_continues(
        stack, unique_name, source_untouched, raw_batches):
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                        # 0-1
    marker = seed.transaction(3, "b", commit=True)  # 2-4, marker 5
    seed.records(3, "c")                        # 6-8
    source_untouched(unique_name)

    # a pre-copy round whose plan ended at 5: the marker at 5 belongs after the record at 4
    first = copy_to(stack, unique_name, marker, raw_batches)
    assert first.digests_equal and first.target_end == marker + 1 and first.markers == 1
    again = copy_to(stack, unique_name, marker, raw_batches)  # the same round again changes nothing
    assert again.records == 0 and again.target_end == marker + 1
    final = copy_to(stack, unique_name, seed.end, raw_batches)
    assert final.digests_equal and final.records == 3
    assert_same_partition(stack, unique_name, 0)
    assert [o for o, *_ in records_of(stack.target, unique_name, 0)] == [0, 1, 2, 3, 4, 6, 7, 8]


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_a_marker_alone_after_a_round_end_is_written_alone(stack, unique_name, source_untouched, raw_batches):
    """A round renders the single invisible offset after a transaction as its commit marker; then a
    transaction aborted before its record was sent adds an abort marker right after it (the run of
    invisible offsets grew past the round's end). The next round must put a marker alone there:
    before, this was a dead end that no later copy could continue (chaos seeds found it)."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                            # 0-1
    marker = seed.transaction(3, "b", commit=True)  # 2-4, marker 5
    first = copy_to(stack, unique_name, seed.end, raw_batches)  # a round up to the stable end, 6
    assert first.target_end == marker + 1 and first.digests_equal
    txn_wire.lone_marker(stack.source, unique_name, 0, f"{unique_name}-lone")  # 6: a marker alone
    seed.end += 1
    with ClusterAdmin(stack.source) as admin:
        admin.wait_for_end(unique_name, 0, seed.end)
    seed.records(3, "c")                            # 7-9
    source_untouched(unique_name)

    final = copy_to(stack, unique_name, seed.end, raw_batches)
    assert final.digests_equal and final.records == 3 and final.markers == 1
    assert_same_partition(stack, unique_name, 0)
    assert [o for o, *_ in records_of(stack.target, unique_name, 0)] == [0, 1, 2, 3, 4, 7, 8, 9]


def stable_end(cluster, topic: str) -> int:
    with ClusterAdmin(cluster) as admin:
        return admin.stable_ends([(topic, 0)])[(topic, 0)]


def test_a_round_ends_at_the_last_stable_offset_and_names_an_open_transaction(stack, unique_name, source_untouched):
    """A transaction open when a round is planned: the round ends where the source is stable; a copy
    asked to go past it names the transaction and its producer (DescribeProducers) instead of calling
    the source truncated; once it commits, the next round continues."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                                   # 0-1
    seed.open_transaction(3)                               # 2-4, open
    with ClusterAdmin(stack.source) as admin:
        stable = admin.stable_ends([(unique_name, 0)])[(unique_name, 0)]
        high = admin.end_offsets([(unique_name, 0)])[(unique_name, 0)]
    assert (stable, high) == (2, 5)
    try:
        first = copy_to(stack, unique_name, stable, raw_batches=True)
        assert first.digests_equal and first.target_end == 2
        with pytest.raises(SourceNotReady, match=r"a transaction open since offset 2 by producer id \d+"):
            copy_to(stack, unique_name, high, raw_batches=True)
    finally:
        seed.txn.commit_transaction(30)                    # marker 5
    seed.end = 6
    seed.records(2, "c")                                   # 6-7
    # the coordinator writes the commit marker after commit_transaction returns: the source is
    # watched (and copied) once it is stable at its end
    wait_until(lambda: stable_end(stack.source, unique_name) == 8, "the source stable at offset 8", 30)
    source_untouched(unique_name)
    final = copy_to(stack, unique_name, seed.end, raw_batches=True)
    assert final.digests_equal
    assert_same_partition(stack, unique_name, 0)


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_records_deleted_on_the_source_while_a_round_copies(stack, unique_name, source_untouched, raw_batches):
    """DeleteRecords on the source while a pre-copy round reads it (or retention): the copy resumes,
    aligns the target to the new log start (what it wrote below it is its own) and goes on; the
    partition ends equal (chaos seeds 12 and 24 found the refusal this replaced)."""
    seed_plain(stack.source, unique_name, partitions=1, per_partition=30_000)
    deleted = []

    def delete_once(_records: int) -> None:
        if not deleted:
            with ClusterAdmin(stack.source) as admin:
                deleted.append(admin.delete_records(unique_name, 0, 25_000))

    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    options = CopyOptions(raw_batches=raw_batches, live=True, progress_hook=delete_once, fetch_max_bytes=64 << 10)
    copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 30_000), options)
    assert deleted
    source_untouched(unique_name)
    final = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 30_000), CopyOptions(live=True))
    assert final.digests_equal
    assert_same_partition(stack, unique_name, 0)


def test_a_log_start_that_became_a_lone_marker_after_a_round_aligned_to_it(stack, unique_name, source_untouched):
    """Records deleted up to a transaction still open: a round aligns the target to that log start
    (undecided then); the transaction commits and its marker lands at the log start. The next round
    must render that marker alone (the DAG test with live producers found this dead end)."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                                   # 0-1
    seed.open_transaction(3)                               # 2-4, open
    with ClusterAdmin(stack.source) as admin:
        assert admin.delete_records(unique_name, 0, 5) == 5
        stable = admin.stable_ends([(unique_name, 0)])[(unique_name, 0)]
    try:
        first = copy_to(stack, unique_name, stable, raw_batches=True)
        assert (first.target_end, all_watermarks(stack.target, unique_name)) == (5, [(5, 5)])
    finally:
        seed.txn.commit_transaction(30)                    # marker 5: the log start, alone
    seed.end = 6
    seed.records(2, "c")                                   # 6-7
    # the coordinator writes the commit marker after commit_transaction returns: the source is
    # watched (and copied) once it is stable at its end
    wait_until(lambda: stable_end(stack.source, unique_name) == 8, "the source stable at offset 8", 30)
    source_untouched(unique_name)
    final = copy_to(stack, unique_name, seed.end, raw_batches=True)
    assert final.digests_equal and final.markers == 1
    assert_same_partition(stack, unique_name, 0)


def test_a_log_start_moved_into_an_invisible_run_this_run_copied(stack, unique_name, source_untouched):
    """Records deleted on the source up to the middle of an aborted transaction the last round copied:
    nothing visible is left above the new log start to compare, and the offset below it on the target
    is an aborted filler, invisible. The manifest's word that the target ends where this run left it
    is enough to trim it (chaos seed 5 found the refusal)."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                             # 0-1
    seed.transaction(2, "b", commit=False)          # 2-3 aborted, marker 4
    first = copy_to(stack, unique_name, seed.end, raw_batches=True)
    assert first.target_end == 5
    with ClusterAdmin(stack.source) as admin:
        assert admin.delete_records(unique_name, 0, 3) == 3
    seed.records(2, "c")                             # 5-6
    source_untouched(unique_name)
    final = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, seed.end), CopyOptions(),
                           own_end=first.target_end)
    assert final.digests_equal
    assert_same_partition(stack, unique_name, 0)


CUT_OFF_AT = """
import os, signal, sys
from kmigrate.config import ClusterConfig
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.model import WorkUnit
source, target, topic, end, step, run, raw = sys.argv[1:8]
def hook(reached):
    if reached == step:
        os.kill(os.getpid(), signal.SIGKILL)
copy_partition(ClusterConfig.from_bootstrap("source", source), ClusterConfig.from_bootstrap("target", target),
               WorkUnit(topic, 0, int(end)), CopyOptions(run_id=run, step_hook=hook, raw_batches=raw == "1"))
"""


def copy_killed_at(stack, topic: str, end: int, step: str, raw_batches: bool) -> str:
    """A copy of `topic` up to `end` in a process of its own, SIGKILLed at `step`; the run id to go on with."""
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, topic)
    run = f"kill-{topic[-8:]}"
    killed = subprocess.run([sys.executable, "-c", CUT_OFF_AT, stack.source.bootstrap_servers,
                             stack.target.bootstrap_servers, topic, str(end), step, run, str(int(raw_batches))],
                            cwd=PROJECT_DIR, capture_output=True, timeout=180)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    return run


@pytest.mark.parametrize("raw_batches", [True, False], ids=["whole-batches", "records"])
def test_a_copy_killed_between_a_record_and_the_commit_marker_after_it(stack, unique_name, source_untouched,
                                                                       raw_batches):
    """The last visible record before a lone commit marker is written, and the copy's process dies
    before the marker (a mirror's task killed, its term ended there). The record must stay visible:
    written inside a transaction, the next copy's fence aborted it and the target was no copy any more
    (the live mirror test with its killed driver found it, one run in a few)."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                            # 0-1
    seed.transaction(3, "b", commit=True)           # 2-4, marker 5
    seed.records(3, "c")                            # 6-8
    source_untouched(unique_name)
    run = copy_killed_at(stack, unique_name, seed.end, "commit-record-written", raw_batches)
    with ClusterAdmin(stack.target) as target:  # the record at 4 written, its marker not
        assert target.end_offsets([(unique_name, 0)])[(unique_name, 0)] == 5
    final = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, seed.end), CopyOptions(run_id=run))
    assert final.digests_equal and final.markers == 1
    assert_same_partition(stack, unique_name, 0)
    assert [o for o, *_ in records_of(stack.target, unique_name, 0)] == [0, 1, 2, 3, 4, 6, 7, 8]


def test_a_lone_marker_left_open_by_a_dead_copy_is_fenced_by_the_next(stack, unique_name, source_untouched):
    """A copy dies inside the transaction of a marker alone (the partition registered, no end sent):
    the next copy of the run fences that transactional id too, so the marker lands where it belongs
    instead of wherever the coordinator's timeout would put it, under what the copy writes next."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.records(2, "a")                            # 0-1
    seed.transaction(3, "b", commit=False)          # 2-4 aborted, marker 5
    seed.records(2, "c")                            # 6-7
    source_untouched(unique_name)
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, unique_name)
    run = f"open-{unique_name[-8:]}"
    first = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, 2), CopyOptions(run_id=run))
    assert first.target_end == 2
    txn_wire.lone_marker(stack.target, unique_name, 0, marker_transactional_id(run, unique_name, 0), end=False)
    final = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, seed.end), CopyOptions(run_id=run))
    assert final.digests_equal
    assert_same_partition(stack, unique_name, 0)
    # the dead copy's marker landed at 2, where it was to go, before the copy wrote on
    with leaders.connect_to_leader(stack.target, unique_name, 0) as conn:
        first = wire.parse_batches(conn.fetch(unique_name, 0, 2, 1 << 16)[2])[0]
    assert (first.base_offset, first.control) == (2, True)


def test_a_copy_killed_in_a_gap_transaction_that_is_all_the_target_holds(stack, unique_name, source_untouched):
    """A copy dies inside the transaction of its first gap, so that the open transaction is all the
    target partition holds: its last stable offset is its log start, as if it were empty. The next
    copy must fence it all the same (it took the partition for empty and wrote its fillers after the
    dead copier's, the target's end past the source's: the live mirror test under load found it)."""
    create_topic(stack.source, unique_name)
    seed = TxnSeeder(stack.source, unique_name)
    seed.transaction(5, "a", commit=False)          # 0-4 aborted, marker 5
    seed.records(3, "c")                            # 6-8
    source_untouched(unique_name)
    run = copy_killed_at(stack, unique_name, seed.end, "gap-transaction-open", raw_batches=True)
    with ClusterAdmin(stack.target) as target:  # the fillers written in the open transaction, nothing else
        assert target.stable_ends([(unique_name, 0)])[(unique_name, 0)] == 0
        assert target.end_offsets([(unique_name, 0)])[(unique_name, 0)] == 5
    final = copy_partition(stack.source, stack.target, WorkUnit(unique_name, 0, seed.end), CopyOptions(run_id=run))
    assert final.digests_equal
    assert all_watermarks(stack.target, unique_name) == [(0, seed.end)]
    assert_same_partition(stack, unique_name, 0)
