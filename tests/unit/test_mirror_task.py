"""How a mirror task schedules its partitions' copies (the loop of kmigrate.run.mirror.task alone:
the reads of the ends and the copies are stand-ins, the clusters play no part in this logic), and
which fetched batches a partition followed in step with the source writes (pure logic)."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from kmigrate.copy import fastfill
from kmigrate.copy.options import CopyOptions
from kmigrate.kafka import multi
from kmigrate.model import WorkUnit
from kmigrate.run.mirror import stream, task
from kmigrate.run.mirror.stream import _writable, fetch_waits
from kmigrate.run.mirror.term import STOP, TERM, Ended, Term

from tests.support.waiting import wait_until
from tests.support.wire import as_fetched


def _partitions(*names: str) -> dict:
    return {(name, 0): task._Partition(WorkUnit(name, 0, 0), None) for name in names}


def test_a_slow_partitions_copy_holds_no_other_partition_back(monkeypatch):
    partitions = _partitions("slow", "fast")
    copies = {"slow": 0, "fast": 0}

    def behind(source, target, partitions_, keys, options):  # noqa: ANN001 - every partition is always behind
        return {key: options for key in keys}

    def copy(source, target, f, lease, options, ended):  # noqa: ANN001
        copies[f.unit.topic] += 1
        if f.unit.topic == "slow":
            time.sleep(0.3)  # a transactional partition's markers, a compacted one's record path, made long
        return 1

    monkeypatch.setattr(task, "_behind", behind)
    monkeypatch.setattr(task, "_copy", copy)
    monkeypatch.setattr(task, "READ_EVERY_S", 0.001)
    term = Term(1, "r", seconds=0.5)
    with ThreadPoolExecutor(2) as pool:
        task._run_term(None, None, partitions, dict.fromkeys(partitions), CopyOptions(), term, lambda: False, pool)
    # in passes, each copy of the fast partition waited for the slow one's: 2 copies each in 0.5 s
    assert copies["slow"] == 2 and copies["fast"] >= 20, copies


def test_a_copy_that_raises_what_is_not_its_partitions_failure_ends_the_task(monkeypatch):
    partitions = _partitions("a", "b")
    monkeypatch.setattr(task, "_behind", lambda s, t, f, keys, options: {key: options for key in keys})

    def copy(source, target, f, lease, options, ended):  # noqa: ANN001
        if f.unit.topic == "b":
            raise RuntimeError("a bug")
        time.sleep(0.01)
        return 0

    monkeypatch.setattr(task, "_copy", copy)
    with ThreadPoolExecutor(2) as pool, pytest.raises(RuntimeError, match="a bug"):
        task._run_term(None, None, partitions, dict.fromkeys(partitions), CopyOptions(), Term(1, "r", seconds=5),
                       lambda: False, pool)


def test_partitions_in_their_pause_are_not_read(monkeypatch):
    partitions = _partitions("ok", "failing")
    partitions[("failing", 0)].pause_until = time.monotonic() + 60
    read: list = []
    monkeypatch.setattr(task, "_behind", lambda s, t, f, keys, options: read.append(list(keys)) or {})
    task._run_term(None, None, partitions, dict.fromkeys(partitions), CopyOptions(),
                   Term(1, "r", seconds=0.2, poll_s=0.01), lambda: False, None)
    assert read and all(keys == [("ok", 0)] for keys in read)


def test_a_verification_holds_no_copy_back(monkeypatch):
    partitions = _partitions("a", "b")
    for f in partitions.values():
        f.own_end = 10
    copies, verified = {"a": 0, "b": 0}, []

    def copy(source, target, f, lease, options, ended):  # noqa: ANN001
        copies[f.unit.topic] += 1
        f.own_end += 1
        time.sleep(0.01)
        return 1

    def verify(source, target, fs):  # noqa: ANN001 - a verification that reads for a long time
        verified.append([f.unit.topic for f in fs])
        time.sleep(0.3)

    monkeypatch.setattr(task, "_behind", lambda s, t, f, keys, options: {key: options for key in keys})
    monkeypatch.setattr(task, "_copy", copy)
    monkeypatch.setattr(task, "_verify", verify)
    term = Term(1, "r", seconds=0.8, verify_every_s=0.1)
    with ThreadPoolExecutor(2) as pool:
        task._run_term(None, None, partitions, dict.fromkeys(partitions), CopyOptions(), term, lambda: False, pool)
    # verified on the task's loop, the 0.3 s readings held every copy back: at most about 25 copies each
    assert len(verified) >= 2 and all(len(v) == 1 for v in verified), verified
    assert min(copies.values()) >= 35, copies


def test_a_task_of_thousands_of_partitions_in_step_turns_its_loop_often(monkeypatch):
    # 5,000 partitions followed in step (a task of a mirror over 10,000) and all due for verification: a
    # turn that went over every partition for each one it could verify held the GIL for seconds
    partitions = {("t", p): _in_step_at(5) for p in range(5_000)}
    for p, f in enumerate(partitions.values()):
        f.unit = WorkUnit("t", p, 0)
        f.producer.append(object())
        f.whole_only = True

    class Streams:  # followed in step until the term ends
        def __init__(self, *args):  # noqa: ANN002
            self.futures = []

        def add(self, f, lease):  # noqa: ANN001
            self.futures.append(Future())
            return self.futures[-1]

        def close(self):
            for future in self.futures:
                future.set_result(0)

    verified = []
    monkeypatch.setattr(task, "Streams", Streams)
    monkeypatch.setattr(task, "_behind", lambda s, t, f, keys, options: {})
    monkeypatch.setattr(task, "_verify", lambda s, t, fs: verified.extend(fs))
    term = Term(1, "r", seconds=120, poll_s=0.01, verify_every_s=0.5)
    # the term ends once 50 are verified (one a turn); the loop's own processor time, not the clock's, is
    # measured, so that a busy machine (a suite starting brokers beside it) does not decide the outcome
    began = time.thread_time()
    task._run_term(None, None, partitions, dict.fromkeys(partitions), CopyOptions(), term,
                   lambda: len(verified) >= 50, None)
    spent = time.thread_time() - began
    assert len(verified) >= 50
    # 50 turns that each went over the 5,000 partitions in step for each partition due took minutes
    assert spent < 1.5, spent


def test_a_task_reports_every_interval_while_a_long_verification_round_goes_on(monkeypatch):
    # 100 partitions to verify at 50 ms each: a round of 5 s, where a report is asked every 0.3 s
    partitions = {("t", p): task._Partition(WorkUnit("t", p, 0), 10) for p in range(100)}
    reports = []
    monkeypatch.setattr(task, "reporter", lambda *args: lambda: reports.append(time.monotonic()))
    monkeypatch.setattr(task, "_behind", lambda s, t, f, keys, options: {})
    monkeypatch.setattr(task, "_verify", lambda s, t, fs: time.sleep(0.05))
    term = Term(1, "r", seconds=1.6, poll_s=0.01, verify_every_s=0.3)
    task._run_term(None, None, partitions, dict.fromkeys(partitions), CopyOptions(), term, lambda: False, None)
    assert len(reports) >= 4, reports  # once as the round began, before: the status's rows stood still


def _fetched(*shapes: tuple[int, int, int], stable: int, high: int | None = None, log_start: int = 0):
    """A Fetch answer of batches (base offset, records, attributes)."""
    blob = b"".join(as_fetched(fastfill.filler_batch(n), base, attrs, 42) for base, n, attrs in shapes)
    return multi.Fetched(0, stable if high is None else high, memoryview(blob), stable, log_start)


def _in_step_at(committed: int, source_start: int = 0) -> task._Partition:
    f = task._Partition(WorkUnit("t", 0, 0), committed)
    f.committed, f.source_start = committed, source_start
    return f


def test_in_step_a_fetch_after_records_lingers_for_more_and_one_after_none_waits_for_the_first(monkeypatch):
    assert fetch_waits(True) == {"max_wait_ms": stream.LINGER_MS, "min_bytes": stream.LINGER_BYTES}
    assert 0 < stream.LINGER_MS <= 10 < stream.WAIT_MS  # a few milliseconds added to a busy source's records
    assert fetch_waits(False) == {"max_wait_ms": stream.WAIT_MS, "min_bytes": 1}
    monkeypatch.setattr(stream, "LINGER_MS", 0)  # no linger: each answer as soon as a record is there
    assert fetch_waits(True) == fetch_waits(False)


def test_in_step_a_batch_goes_whole_only_where_a_copy_would_send_it_whole():
    def offsets(fetched, committed=10):  # noqa: ANN001
        batches, why = _writable(_in_step_at(committed), fetched)
        return [(b.base_offset, b.last_offset) for b in batches], why

    # plain batches up to where the source ends: all of them
    assert offsets(_fetched((10, 5, 0), (15, 5, 0), stable=20)) == ([(10, 14), (15, 19)], None)
    # nothing new: nothing written, the partition stays
    assert offsets(_fetched(stable=10)) == ([], None)
    # the last batch ends below the source's end and nothing fetched follows it: it waits
    assert offsets(_fetched((10, 5, 0), (15, 5, 0), stable=25)) == ([(10, 14)], None)
    # a transaction's records, decided or not, or a marker: handed back to the copy
    for attributes in (0x10, 0x30):
        batches, why = offsets(_fetched((10, 5, attributes), (15, 5, 0), stable=20))
        assert batches == [] and "not a plain batch" in why
    # a plain batch before a transaction's records: a commit marker may have to follow its last record
    assert offsets(_fetched((10, 5, 0), (15, 5, 0x10), stable=20))[0] == []
    # what lies past the last stable offset (an open transaction before it) is not written
    assert offsets(_fetched((10, 5, 0), (15, 5, 0), stable=12, high=20))[0] == []
    # a gap (records compacted away, or not where the DR end is): handed back
    assert offsets(_fetched((11, 5, 0), stable=16))[1] is not None
    assert offsets(_fetched((10, 5, 0), (16, 5, 0), stable=21))[0] == []
    # a LogAppendTime batch: handed back (the DR broker would stamp its own time)
    assert offsets(_fetched((10, 5, 0x08), stable=15))[0] == []
    # the source's log start moved: the copy aligns the DR log start first
    batches, why = _writable(_in_step_at(10, source_start=3), _fetched((10, 5, 0), stable=15, log_start=7))
    assert batches == [] and "log start moved to 7" in why
    # an error from the source: handed back
    assert "NOT_LEADER" in _writable(_in_step_at(10), multi.Fetched(6, -1, memoryview(b"")))[1]


@pytest.mark.parametrize("ending", ["term ended", "later term", "stop requested"])
def test_a_terms_end_is_read_from_the_manifest_off_the_write_path(tmp_path, ending):
    from kmigrate.manifest import Manifest

    manifest = Manifest(str(tmp_path), "mirror-run")
    manifest.replace(TERM, {"term": 3, "ended": False})
    ended = Ended(Term(3, "mirror-run", 60, str(tmp_path), check_every_s=0.05))
    try:
        assert not ended()
        if ending == "stop requested":
            manifest.get_or_create(STOP, lambda: {"why": "a test"})
        else:
            manifest.replace(TERM, {"term": 4 if ending == "later term" else 3, "ended": ending == "term ended"})
        wait_until(ended, f"the term's end ({ending}) read", timeout_s=5, poll_s=0.01)
    finally:
        ended.close()
    # a term already ended when a task starts is known at once, before its first write
    assert Ended(Term(3, "mirror-run", 60, str(tmp_path)))()
    assert not Ended(Term(3, "mirror-run", 60, None))()  # no manifest to read: never
