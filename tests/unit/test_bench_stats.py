"""The benchmarks' interval of a median (bench/common.py): pure arithmetic."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from common import median_interval  # noqa: E402


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
