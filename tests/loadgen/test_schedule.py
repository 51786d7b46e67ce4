from __future__ import annotations

import pytest

from pytest_sglang.loadgen.schedule import OpenLoop


def test_constant_arrivals() -> None:
    assert OpenLoop(2.0, "constant").offsets(4, "s") == [0.0, 0.5, 1.0, 1.5]


def test_poisson_arrivals_are_seeded_and_have_the_requested_mean_rate() -> None:
    offsets = OpenLoop(10.0).offsets(5000, "seed")
    assert offsets == OpenLoop(10.0).offsets(5000, "seed")
    assert offsets != OpenLoop(10.0).offsets(5000, "other")
    assert offsets[0] == 0.0 and offsets == sorted(offsets)
    mean_gap = offsets[-1] / (len(offsets) - 1)
    # 5000 exponential gaps: the mean is within 5 % of 0.1 s (about 3.5 standard errors).
    assert 0.095 < mean_gap < 0.105


@pytest.mark.parametrize("rate", [0, -1.0, float("inf"), float("nan")])
def test_invalid_rate(rate: float) -> None:
    with pytest.raises(ValueError, match="the request rate must be a finite number > 0"):
        OpenLoop(rate, "constant")


def test_invalid_arrival() -> None:
    with pytest.raises(ValueError, match="arrival must be one of 'poisson', 'constant'"):
        OpenLoop(1.0, "bursty")  # type: ignore[arg-type]
