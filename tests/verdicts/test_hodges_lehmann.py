"""Hodges-Lehmann ratio and its exact bounds: textbook examples, duality and coverage."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from math import comb

import pytest

from pytest_sglang.verdicts import stats
from pytest_sglang.verdicts.stats import hodges_lehmann_ratio, mann_whitney_u


def exp_all(values: list[float]) -> list[float]:
    """Additive textbook examples become ratio examples on the exp scale."""
    return [math.exp(v) for v in values]


# Hollander & Wolfe's chicken data, as published with SAS PROC NPAR1WAY HL results
# (PSI AIMS CAMIS, "Non-parametric point estimation in SAS"): location shift A - B = 0.5600,
# 95% Moses limits -0.3700 and 1.1830, "Exact" limits -0.2200 and 1.0820.
CHICKEN_A = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
CHICKEN_B = [0.878, 0.647, 0.598, 2.050, 1.060, 1.290, 1.060, 3.140, 1.290]


def test_chicken_example_estimate_and_bounds() -> None:
    result = hodges_lehmann_ratio(exp_all(CHICKEN_A), exp_all(CHICKEN_B), alpha=0.025)
    assert math.log(result.estimate) == pytest.approx(0.56, abs=1e-9)
    # Bauer's order statistics from the no-ties table: D(18) and D(64) of the 81 differences,
    # the limits SAS prints as Moses limits for these data.
    assert math.log(result.lower) == pytest.approx(-0.37, abs=1e-9)
    assert math.log(result.upper) == pytest.approx(1.183, abs=1e-9)
    assert result.confidence == pytest.approx(
        1 - sum(stats._no_tie_counts(9, 9)[:18]) / comb(18, 9)
    )
    assert result.confidence >= 0.975


def test_chicken_example_sas_exact_limits_condition_on_ties() -> None:
    # SAS's "Exact" limits use the null distribution conditional on the data's tie pattern
    # (two tied pairs inside B). Our exact conditional distribution reproduces them: its
    # critical count is one larger, giving D(19) = -0.22 and D(63) = 1.082. This is what the
    # stats docstring documents as the difference from SAS.
    pooled = sorted(CHICKEN_A + CHICKEN_B)
    groups = tuple(len(list(g)) for _, g in itertools.groupby(pooled))
    counts = stats._tied_counts(9, groups)
    total = comb(18, 9)
    cum = 0
    c = 0
    for h, count in enumerate(counts):  # index h is 2U
        if (cum + count) / total > 0.025:
            break
        cum += count
        c = h // 2 + 1 if h % 2 == 0 else c
    differences = sorted(a - b for a in CHICKEN_A for b in CHICKEN_B)
    assert c == 19
    assert differences[c - 1] == pytest.approx(-0.22, abs=1e-9)
    assert differences[81 - c] == pytest.approx(1.082, abs=1e-9)


def test_sas_react_example_estimate_and_lower_limit() -> None:
    # SAS/STAT PROC NPAR1WAY Hodges-Lehmann example (React data, alpha=.02): shift 0.35,
    # limits 0.00 and 0.82 (Moses). Heavily tied data: SAS's "Exact" upper limit (1.33)
    # inverts the conditional test at every shift; ours keeps Bauer's order statistics.
    stim1 = [1.94, 1.94, 2.92, 2.92, 2.92, 2.92, 3.27, 3.27, 3.27, 3.27, 3.70, 3.70, 3.74]
    stim2 = [3.27, 3.27, 3.27, 3.70, 3.70, 3.74]
    result = hodges_lehmann_ratio(exp_all(stim2), exp_all(stim1), alpha=0.01)
    assert math.log(result.estimate) == pytest.approx(0.35, abs=1e-9)
    assert math.log(result.lower) == pytest.approx(0.0, abs=1e-9)
    assert math.log(result.upper) == pytest.approx(0.82, abs=1e-9)


def test_wpi_textbook_confidence_level() -> None:
    # WPI MA2612 worked example (4 new vs 2 old specimens): the exact interval available is
    # the 86.6% one, 1 - 2/15; with these sizes it is [min, max] of the differences.
    new = [7651.0, 8337.0, 6989.0, 9568.0]
    old = [9477.0, 13581.0]
    result = hodges_lehmann_ratio(
        exp_all([v / 1000 for v in new]), exp_all([v / 1000 for v in old]), alpha=0.067
    )
    assert 1 - 2 * (1 - result.confidence) == pytest.approx(0.8667, abs=1e-4)
    differences = [a / 1000 - b / 1000 for a in new for b in old]
    assert math.log(result.lower) == pytest.approx(min(differences), abs=1e-9)
    assert math.log(result.upper) == pytest.approx(max(differences), abs=1e-9)


def test_estimate_is_median_of_pairwise_ratios() -> None:
    rng = random.Random(1)
    for _ in range(50):
        a = [rng.lognormvariate(0, 0.1) for _ in range(rng.randint(1, 7))]
        b = [rng.lognormvariate(0, 0.1) for _ in range(rng.randint(1, 7))]
        ratios = sorted(x / y for x in a for y in b)
        expected = math.exp(statistics.median(math.log(r) for r in ratios))
        assert hodges_lehmann_ratio(a, b, alpha=0.1).estimate == pytest.approx(expected, rel=1e-12)


def test_confidence_for_five_against_five() -> None:
    # P0(U <= 4) = (1 + 1 + 2 + 3 + 5) / 252 = 12/252 for 5 + 5 runs.
    result = hodges_lehmann_ratio([1.0, 2, 3, 4, 5], [1.5, 2.5, 3.5, 4.5, 5.5])
    assert result.confidence == pytest.approx(1 - 12 / 252, rel=1e-15)


def test_no_bound_possible_for_tiny_samples() -> None:
    result = hodges_lehmann_ratio([1.0, 2.0], [1.5, 2.5], alpha=0.05)
    assert (result.lower, result.upper, result.confidence) == (0.0, math.inf, 1.0)


@pytest.mark.parametrize("alpha", [0.01, 0.05, 0.1])
def test_bounds_are_dual_to_the_test(alpha: float) -> None:
    # lower > r0  <=>  the exact test of a against r0 * b rejects at alpha, and the mirror.
    rng = random.Random(int(alpha * 1000))
    checked = 0
    for _ in range(300):
        m, n = rng.randint(3, 9), rng.randint(3, 9)
        if stats.min_p_value(m, n) > alpha:
            continue
        a = [rng.lognormvariate(0.03, 0.04) for _ in range(m)]
        b = [rng.lognormvariate(0.0, 0.04) for _ in range(n)]
        result = hodges_lehmann_ratio(a, b, alpha=alpha)
        for r0 in (rng.uniform(0.95, 1.1) for _ in range(5)):
            scaled = [r0 * y for y in b]
            assert (result.lower > r0) == (mann_whitney_u(a, scaled, "greater").p <= alpha)
            assert (result.upper < r0) == (mann_whitney_u(a, scaled, "less").p <= alpha)
            checked += 1
    assert checked > 500


def test_coverage_by_simulation() -> None:
    rng = random.Random(2)
    true_ratio = 1.07
    covered_low = covered_high = 0
    trials = 3000
    for _ in range(trials):
        a = [true_ratio * rng.lognormvariate(0, 0.03) for _ in range(5)]
        b = [rng.lognormvariate(0, 0.03) for _ in range(5)]
        result = hodges_lehmann_ratio(a, b)
        covered_low += result.lower <= true_ratio
        covered_high += result.upper >= true_ratio
    # Exact one-sided confidence 1 - 12/252 = 0.952; binomial sd at 3000 trials is 0.004.
    assert covered_low / trials == pytest.approx(0.952, abs=0.015)
    assert covered_high / trials == pytest.approx(0.952, abs=0.015)


def test_equivariance() -> None:
    rng = random.Random(3)
    a = [rng.lognormvariate(0, 0.05) for _ in range(6)]
    b = [rng.lognormvariate(0, 0.05) for _ in range(7)]
    base = hodges_lehmann_ratio(a, b)
    scaled = hodges_lehmann_ratio([2.0 * x for x in a], b)
    assert scaled.estimate == pytest.approx(2.0 * base.estimate, rel=1e-12)
    assert scaled.lower == pytest.approx(2.0 * base.lower, rel=1e-12)
    swapped = hodges_lehmann_ratio(b, a)
    assert swapped.estimate == pytest.approx(1.0 / base.estimate, rel=1e-12)
    assert swapped.lower == pytest.approx(1.0 / base.upper, rel=1e-12)
    assert swapped.upper == pytest.approx(1.0 / base.lower, rel=1e-12)
    assert swapped.confidence == base.confidence


def test_lower_bound_never_above_estimate_or_upper() -> None:
    rng = random.Random(4)
    for _ in range(200):
        a = [rng.lognormvariate(0, 0.1) for _ in range(rng.randint(3, 8))]
        b = [rng.lognormvariate(0, 0.1) for _ in range(rng.randint(3, 8))]
        result = hodges_lehmann_ratio(a, b, alpha=0.05)
        assert result.lower <= result.estimate <= result.upper
        assert result.confidence >= 0.95


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf, math.nan])
def test_rejects_non_positive_values(bad: float) -> None:
    with pytest.raises(ValueError):
        hodges_lehmann_ratio([1.0, bad, 2.0], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.7])
def test_rejects_bad_alpha(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        hodges_lehmann_ratio([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], alpha=alpha)
