"""The record-by-record comparison of a compacted partition (`records.compacted_differences_of`):
what the source's log cleaner removes after the copy is no difference, anything else is."""
from __future__ import annotations

from kmigrate.kafka.records import compacted_differences_of

TS = 1_700_000_000_000


def rec(offset, key, value=b"v", headers=None, timestamp=TS):
    return (offset, key, value, headers, timestamp)


def compare(source, target, limit=10, later=None):
    calls = []

    def target_records():
        calls.append(1)
        return iter(target)

    result = compacted_differences_of(iter(source), target_records, limit,
                                      later_source_records=None if later is None else (lambda: iter(later)))
    assert len(calls) == 2
    return result


LOG = [rec(0, b"a", b"a0"), rec(1, b"b", b"b0", [("h", b"1"), ("n", None)]), rec(2, b"a", b"a1"),
       rec(3, b"c", None), rec(4, b"b", b"b1"), rec(5, b"d", b"d0")]


def test_identical_streams_are_equal():
    assert compare(LOG, LOG) == (6, [])


def test_empty_streams_are_equal():
    assert compare([], []) == (0, [])


def test_a_record_the_source_cleaned_and_the_target_superseded_is_no_problem():
    source = [r for r in LOG if r[0] not in (0, 1)]  # a@0 and b@1 are superseded by a@2 and b@4
    assert compare(source, LOG) == (4, [])


def test_a_tombstone_the_source_cleaned_is_no_problem():
    source = [r for r in LOG if r[0] != 3]  # c@3 is the last record of its key, a tombstone
    assert compare(source, LOG) == (5, [])


def test_a_target_only_record_not_superseded_is_a_problem_naming_offset_and_key():
    source = [r for r in LOG if r[0] != 5]
    compared, problems = compare(source, LOG)
    assert compared == 5
    assert len(problems) == 1
    assert problems[0].startswith("offset 5: ") and "b'd'" in problems[0]
    assert "target only" in problems[0] and "not superseded" in problems[0]
    assert "delete.retention.ms" in problems[0]  # the usual cause: a tombstone cleaned before it was copied


def test_superseded_means_a_later_record_with_the_key_not_an_earlier_one():
    source = [r for r in LOG if r[0] != 4]  # b@4 is the last b; b@1 below it does not supersede it
    [problem] = compare(source, LOG)[1]
    assert problem.startswith("offset 4: ") and "b'b'" in problem


def test_the_key_shown_is_truncated():
    key = b"k" * 500
    [problem] = compare([], [rec(7, key)])[1]
    assert problem.startswith("offset 7: ") and "b'" + "k" * 40 + "'" in problem and "k" * 41 not in problem


def test_a_keyless_target_only_record_is_a_problem():
    [problem] = compare([rec(0, b"a")], [rec(0, b"a"), rec(1, None, b"x")])[1]
    assert problem.startswith("offset 1: ") and "without a key" in problem
    # a keyless tombstone too: a cleaner removes records with keys only
    problems = compare([], [rec(3, None, None), rec(4, None, b"x")])[1]
    assert [p.split(":")[0] for p in problems] == ["offset 3", "offset 4"]


def test_a_different_value_at_the_same_offset_is_a_problem():
    target = [rec(2, b"a", b"other") if r[0] == 2 else r for r in LOG]
    compared, problems = compare(LOG, target)
    assert compared == 6
    assert problems == ["offset 2: the target's record differs from the source's (value)"]


def test_each_field_is_compared():
    changed = {
        "key": rec(0, b"z", b"a0"),
        "headers": rec(0, b"a", b"a0", [("h", b"1")]),
        "timestamp": rec(0, b"a", b"a0", timestamp=TS + 1),
    }
    for field, record in changed.items():
        [problem] = compare([rec(0, b"a", b"a0")], [record])[1]
        assert problem == f"offset 0: the target's record differs from the source's ({field})"
    # no headers and an empty list hash alike in ContentDigest
    assert compare([rec(0, b"a", headers=None)], [rec(0, b"a", headers=[])])[1] == []
    # a tombstone at the same offset where the source has a value is a difference too
    assert compare([rec(0, b"a", b"a0")], [rec(0, b"a", None)])[1] == [
        "offset 0: the target's record differs from the source's (value)"]


def test_a_source_record_missing_on_the_target_is_a_problem():
    for gone in (3, 5):  # a tombstone, the last of its key: the target must hold them
        target = [r for r in LOG if r[0] != gone]
        assert compare(LOG, target) == (6, [f"offset {gone}: on the source, missing on the target"])


def test_a_source_record_the_target_cleaned_is_no_problem():
    # the target's own cleaner removed a@0: a later target record (a@2) has its key
    assert compare(LOG, [r for r in LOG if r[0] != 0]) == (6, [])


def test_a_later_source_record_with_the_key_supersedes_a_target_only_record():
    # the source's cleaner removed d@5 because d was written again after the compared range
    source = [r for r in LOG if r[0] != 5]
    assert compare(source, LOG, later=[rec(9, b"x"), rec(10, b"d", b"d1")]) == (5, [])
    [problem] = compare(source, LOG, later=[rec(9, b"x")])[1]
    assert problem.startswith("offset 5: ")


def test_later_source_records_are_read_only_when_needed_and_only_as_far_as_needed():
    read = []

    def later():
        for record in [rec(9, b"d"), rec(10, b"x")]:
            read.append(record[0])
            yield record

    assert compacted_differences_of(iter(LOG), lambda: iter(LOG), later_source_records=later) == (6, [])
    assert read == []
    source = [r for r in LOG if r[0] != 5]
    assert compacted_differences_of(iter(source), lambda: iter(LOG), later_source_records=later) == (5, [])
    assert read == [9]


def test_a_source_record_the_targets_cleaner_removed_for_a_later_target_record_is_no_problem():
    # a mirror writes on past the compared range while it is verified; the target's cleaner may then
    # remove a record in the range (superseded past it) before the source's cleaner does
    target = [r for r in LOG if r[0] != 5]  # d@5 removed on the target: d was written again at 12
    assert compacted_differences_of(iter(LOG), lambda: iter(target),
                                    later_target_records=lambda: iter([rec(11, b"x"), rec(12, b"d")])) == (6, [])
    [problem] = compacted_differences_of(iter(LOG), lambda: iter(target),
                                         later_target_records=lambda: iter([rec(11, b"x")]))[1]
    assert problem == "offset 5: on the source, missing on the target"
    [problem] = compare(LOG, target)[1]  # without later target records, as before
    assert problem == "offset 5: on the source, missing on the target"


def test_later_target_records_are_read_only_for_a_keyed_record_missing_and_keep_order_and_count():
    read = []

    def later():
        read.append(1)
        return iter([rec(20, b"k3")])

    assert compacted_differences_of(iter(LOG), lambda: iter(LOG), later_target_records=later) == (6, [])
    assert read == []
    source = [rec(o, f"k{o % 4}".encode()) for o in range(12)] + [rec(12, None)]
    compared, problems = compacted_differences_of(iter(source), lambda: iter([]), limit=4,
                                                  later_target_records=later)
    assert read == [1] and compared == 13
    # k3 (3, 7, 11) is found later; the other nine keyed records and the unkeyed one are problems
    assert problems == [f"offset {o}: on the source, missing on the target" for o in (0, 1, 2, 4)] + ["... and 6 more"]


def test_problems_are_in_offset_order_and_limited():
    source = [rec(o, f"s{o}".encode()) for o in range(0, 40, 2)]  # 20 records, all missing on the target
    target = [rec(o, f"t{o}".encode()) for o in range(1, 40, 2)]  # 20 target-only records, none superseded
    compared, problems = compare(source, target, limit=5)
    assert compared == 20
    assert [p.split(":")[0] for p in problems[:5]] == [f"offset {o}" for o in range(5)]
    assert problems[5] == "... and 35 more"
    assert len(problems) == 6


def test_no_more_line_at_exactly_the_limit():
    target = [r for r in LOG if r[0] not in (4, 5)]  # the last records of b and d
    assert compare(LOG, target, limit=2)[1] == ["offset 4: on the source, missing on the target",
                                               "offset 5: on the source, missing on the target"]
    assert compare(LOG, target, limit=1)[1] == ["offset 4: on the source, missing on the target", "... and 1 more"]
    assert compare(LOG, target, limit=0)[1] == ["... and 2 more"]
