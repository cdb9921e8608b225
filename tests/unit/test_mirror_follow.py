"""How a mirror task schedules its partitions' copies (the loop of kmigrate.run.mirror.follow alone:
the reads of the ends and the copies are stand-ins, the clusters play no part in this logic)."""
from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from kmigrate.copy.options import CopyOptions
from kmigrate.model import WorkUnit
from kmigrate.run.mirror import follow


def _followed(*names: str) -> dict:
    return {(name, 0): follow._Followed(WorkUnit(name, 0, 0), None) for name in names}


def test_a_slow_partitions_copy_holds_no_other_partition_back(monkeypatch):
    followed = _followed("slow", "fast")
    copies = {"slow": 0, "fast": 0}

    def behind(source, target, followed_, keys, options):  # noqa: ANN001 - every partition is always behind
        return {key: options for key in keys}

    def copy(source, target, f, lease, options, ended):  # noqa: ANN001
        copies[f.unit.topic] += 1
        if f.unit.topic == "slow":
            time.sleep(0.3)  # a transactional partition's markers, a compacted one's record path, made long
        return 1

    monkeypatch.setattr(follow, "_behind", behind)
    monkeypatch.setattr(follow, "_copy", copy)
    monkeypatch.setattr(follow, "READ_EVERY_S", 0.001)
    term = follow.Term(1, "r", seconds=0.5)
    with ThreadPoolExecutor(2) as pool:
        follow._follow(None, None, followed, dict.fromkeys(followed), CopyOptions(), term, lambda: False, pool)
    # in passes, each copy of the fast partition waited for the slow one's: 2 copies each in 0.5 s
    assert copies["slow"] == 2 and copies["fast"] >= 20, copies


def test_a_copy_that_raises_what_is_not_its_partitions_failure_ends_the_task(monkeypatch):
    followed = _followed("a", "b")
    monkeypatch.setattr(follow, "_behind", lambda s, t, f, keys, options: {key: options for key in keys})

    def copy(source, target, f, lease, options, ended):  # noqa: ANN001
        if f.unit.topic == "b":
            raise RuntimeError("a bug")
        time.sleep(0.01)
        return 0

    monkeypatch.setattr(follow, "_copy", copy)
    with ThreadPoolExecutor(2) as pool, pytest.raises(RuntimeError, match="a bug"):
        follow._follow(None, None, followed, dict.fromkeys(followed), CopyOptions(), follow.Term(1, "r", seconds=5), lambda: False, pool)


def test_partitions_in_their_pause_are_not_read(monkeypatch):
    followed = _followed("ok", "failing")
    followed[("failing", 0)].pause_until = time.monotonic() + 60
    read: list = []
    monkeypatch.setattr(follow, "_behind", lambda s, t, f, keys, options: read.append(list(keys)) or {})
    follow._follow(None, None, followed, dict.fromkeys(followed), CopyOptions(), follow.Term(1, "r", seconds=0.2, poll_s=0.01),
                   lambda: False, None)
    assert read and all(keys == [("ok", 0)] for keys in read)
