"""The benchmarks' interval of a median and their reading of a JVM's collection pauses
(bench/common.py): pure arithmetic and parsing."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import gc_pauses, median_interval  # noqa: E402


def test_five_rounds_give_the_range_and_its_coverage():
    # with 5 values only (min, max) is an interval: it misses the median when all 5 fall on one side
    assert median_interval([1.3, 0.9, 1.0, 1.1, 1.2]) == (0.9, 1.3, 1 - 2 / 32)


def test_fifteen_rounds_drop_the_three_extremes_each_side():
    low, high, coverage = median_interval(list(range(1, 16)))
    assert (low, high) == (4, 12)  # k = 4: 1 - 2 * P(Binomial(15, 1/2) <= 3)
    assert coverage == pytest.approx(0.9648, abs=1e-4)


def test_the_interval_covers_a_known_median_as_often_as_it_says():
    rng = random.Random(7)
    trials, hits = 2000, 0
    for _ in range(trials):
        low, high, _ = median_interval([rng.lognormvariate(0, 0.2) for _ in range(15)])
        hits += low <= 1.0 <= high  # the lognormal's median is exp(0) = 1
    assert 0.95 <= hits / trials <= 0.98


def test_no_values_is_an_error():
    with pytest.raises(ValueError):
        median_interval([])


def test_the_pauses_of_a_window_are_read_from_the_gc_log_and_its_rotated_files(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "gc.log.0").write_text(
        "[2026-11-28T17:37:31.672+0000][1410.984s] GC(1441) Pause Young (Mixed) (G1 Evacuation Pause) "
        "405M->383M(512M) 14.941ms\n")
    (tmp_path / "logs" / "gc.log").write_text(
        "[2026-11-28T18:37:33.048+0100][1412.360s] GC(1442) Pause Young (Normal) (G1 Evacuation Pause) "
        "404M->383M(512M) 118.360ms\n"
        "[2026-11-28T17:37:33.100+0000][1412.400s] GC(1443) Concurrent Mark Cycle 40.000ms\n"
        "[2026-11-28T17:40:00.000+0000][1559.000s] GC(1444) Pause Remark 300M->300M(512M) 5.000ms\n")
    began = 1795887451.0  # 2026-11-28T17:37:31Z
    assert gc_pauses(tmp_path, began, began + 60) == {"pauses": 2, "paused_s": 0.13, "longest_s": 0.118}
    assert gc_pauses(tmp_path, began, began + 1000)["pauses"] == 3
    assert gc_pauses(tmp_path / "elsewhere", began, began + 60) is None
