"""A transaction marker the target's coordinator writes twice (copy/repeats.py): Kafka 4.3 appends a
marker again when its coordinator sends it a second time (it lost the leader's answer: the leader
killed right after it wrote the marker, as the fault matrix does). The target then holds a marker
where the source holds a record, and the copy cannot go on at the source's offsets: it must stop,
saying so, whether the repeat lands while it copies or between two copies, and write nothing past
it. The repeat is made as the coordinator makes it: WriteTxnMarkers to the leader with the marker's
producer, epoch and coordinator epoch."""
from __future__ import annotations

import pytest
from kmigrate.copy import repeats
from kmigrate.copy.partition import copy_partition
from kmigrate.copy.writer import CopyOptions
from kmigrate.errors import RepeatedMarker
from kmigrate.kafka import txn_wire
from kmigrate.kafka.admin import ClusterAdmin
from kmigrate.model import WorkUnit
from kmigrate.run.targets.prepare import prepare_target_topic

from tests.support.kafka import TxnSeeder, create_topic, records_of, repeat_marker, watermarks


def seeded(stack, topic: str) -> tuple[TxnSeeder, int]:
    create_topic(stack.source, topic)
    seed = TxnSeeder(stack.source, topic)
    seed.records(2, "a")                            # 0-1
    marker = seed.transaction(3, "b", commit=True)  # 2-4, marker 5
    seed.records(3, "c")                            # 6-8
    with ClusterAdmin(stack.source) as source, ClusterAdmin(stack.target) as target:
        prepare_target_topic(source, target, topic)
    return seed, marker


def copy_to(stack, topic: str, end: int):
    return copy_partition(stack.source, stack.target, WorkUnit(topic, 0, end), CopyOptions())


def test_a_marker_repeated_between_two_copies_stops_the_next_one_naming_it(stack, unique_name, source_untouched):
    seed, marker = seeded(stack, unique_name)
    source_untouched(unique_name)
    first = copy_to(stack, unique_name, marker)  # a round that ends at the marker writes it
    assert first.digests_equal and first.target_end == marker + 1
    assert repeat_marker(stack.target, unique_name, 0, marker) == marker + 1  # where the source has c-0

    with pytest.raises(RepeatedMarker, match=rf"marker at offset {marker} a second time, at offset {marker + 1}"):
        copy_to(stack, unique_name, seed.end)
    assert watermarks(stack.target, unique_name) == (0, marker + 2)  # nothing written after it
    assert [o for o, *_ in records_of(stack.target, unique_name, 0)] == [0, 1, 2, 3, 4]


def test_a_marker_repeated_while_the_copy_runs_stops_it_naming_it(stack, unique_name, source_untouched, monkeypatch):
    seed, marker = seeded(stack, unique_name)
    source_untouched(unique_name)
    written = txn_wire.lone_marker
    repeated = []

    def and_again(cluster, topic, partition, transactional_id, commit=False, **keywords):
        """The copier's commit marker, then the coordinator's second send of it once the first landed."""
        written(cluster, topic, partition, transactional_id, commit, **keywords)
        with ClusterAdmin(cluster) as admin:
            admin.wait_for_end(topic, partition, marker + 1)
        repeated.append(repeat_marker(cluster, topic, partition, marker))

    monkeypatch.setattr(txn_wire, "lone_marker", and_again)
    with pytest.raises(RepeatedMarker) as raised:
        copy_to(stack, unique_name, seed.end)
    assert repeated == [marker + 1]
    assert (raised.value.marker, raised.value.repeat) == (marker, marker + 1)
    assert watermarks(stack.target, unique_name) == (0, marker + 2)  # c-0 not written behind it


def test_a_marker_the_source_holds_twice_is_no_repeat_of_the_target(stack, unique_name):
    """Two markers of one producer with its records between them are two transactions: not named."""
    seed, marker = seeded(stack, unique_name)
    again = seed.transaction(2, "d", commit=False)
    copied = copy_to(stack, unique_name, seed.end)
    assert copied.digests_equal
    assert repeats.find(stack.target, unique_name, 0, 0, again) is None
    assert repeats.find(stack.source, unique_name, 0, 0, again) is None
