"""percentile(): numpy's default linear interpolation, and clear errors."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from pytest_sglang.measure.metrics import percentile


@pytest.mark.parametrize("seed", range(20))
def test_matches_numpy_linear(seed: int) -> None:
    rng = random.Random(seed)
    values = [rng.lognormvariate(0, 1) for _ in range(rng.randint(1, 40))]
    for q in (0, 1, 10, 25, 50, 62.5, 75, 90, 95, 99, 99.9, 100, rng.uniform(0, 100)):
        expected = float(np.percentile(values, q, method="linear"))
        assert percentile(values, q) == pytest.approx(expected, rel=1e-15, abs=0)


def test_small_worked_examples() -> None:
    assert percentile([3.0], 90) == 3.0
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([1, 2, 3, 4], 0) == 1
    assert percentile([1, 2, 3, 4], 100) == 4
    assert percentile([10, 20], 25) == 12.5
    # Order of the input does not matter.
    assert percentile([4, 1, 3, 2], 75) == percentile([1, 2, 3, 4], 75) == 3.25


def test_monotone_in_q() -> None:
    rng = random.Random(7)
    values = [rng.random() for _ in range(17)]
    qs = [i / 4 for i in range(401)]
    results = [percentile(values, q) for q in qs]
    assert results == sorted(results)
    assert results[0] == min(values) and results[-1] == max(values)


def test_equal_values_do_not_overshoot() -> None:
    assert percentile([0.1] * 7, 33.3) == 0.1


@pytest.mark.parametrize("q", [-0.1, 100.1, math.nan])
def test_q_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0, 2.0], q)


def test_empty_and_nan() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match="NaN"):
        percentile([1.0, math.nan], 50)
