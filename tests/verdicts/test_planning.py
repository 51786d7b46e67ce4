"""Student t and the sample-size planning helpers (reference notes, Part 2.3)."""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats as scipy_stats

from pytest_sglang.verdicts.stats import (
    log_spread,
    min_detectable_ratio,
    runs_needed,
    t_ppf,
    t_sf,
)


@pytest.mark.parametrize("df", [0.5, 1, 2, 3, 4, 6, 8, 10, 18, 30, 100, 1000, 100_000])
def test_t_distribution_matches_scipy(df: float) -> None:
    for t in (-40.0, -3.0, -1.0, -1e-6, 0.0, 0.3, 1.0, 1.645, 2.5, 6.0, 50.0):
        assert t_sf(t, df) == pytest.approx(float(scipy_stats.t.sf(t, df)), rel=1e-9, abs=1e-300)
    for p in (0.001, 0.05, 0.2, 0.5, 0.6, 0.8, 0.9, 0.95, 0.975, 0.99, 0.9999):
        assert t_ppf(p, df) == pytest.approx(float(scipy_stats.t.ppf(p, df)), rel=1e-9, abs=1e-12)


def test_t_near_zero_against_closed_forms() -> None:
    # Where scipy itself loses digits (t ~ 1e-8 at df=1), check closed forms instead:
    # df=1 is Cauchy, df=2 has sf(t) = 1/2 - t / (2 sqrt(2 + t^2)).
    for t in (1e-12, 1e-8, 1e-4, 0.5, 3.0):
        assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, rel=1e-13)
        assert t_sf(t, 2) == pytest.approx(0.5 - t / (2 * math.sqrt(2 + t * t)), rel=1e-13)
    assert t_ppf(0.5000001, 4) == pytest.approx(1e-7 / 0.375, rel=1e-6)  # pdf(0) = 3/8


def test_t_reference_values() -> None:
    # "t_{0.95,4} = 2.13 vs z = 1.645" (reference notes, Part 2.2 c).
    assert t_ppf(0.95, 4) == pytest.approx(2.1318, abs=1e-4)
    assert t_sf(math.inf, 3) == 0.0
    assert t_sf(-math.inf, 3) == 1.0


def test_t_errors() -> None:
    with pytest.raises(ValueError):
        t_ppf(1.0, 3)
    with pytest.raises(ValueError):
        t_ppf(0.5, 0)
    with pytest.raises(ValueError):
        t_sf(math.nan, 3)


def sigma_for(cv: float) -> float:
    return math.sqrt(math.log1p(cv * cv))


# Reference notes, Part 2.3: n per config at one-sided alpha 0.05, power 0.8 (0.9).
@pytest.mark.parametrize(
    ("cv", "gain", "n80", "n90"),
    [
        (0.02, 0.02, 14, 19),
        (0.03, 0.02, 30, 41),
        (0.03, 0.05, 6, 8),
        (0.05, 0.02, 80, 110),
        (0.05, 0.05, 14, 19),
        (0.05, 0.10, 5, 6),
        (0.01, 0.02, None, 6),
    ],
)
def test_runs_needed_matches_reference_table(
    cv: float, gain: float, n80: int | None, n90: int
) -> None:
    if n80 is not None:
        assert runs_needed(sigma_for(cv), 1 + gain) == n80
    assert runs_needed(sigma_for(cv), 1 + gain, power=0.9) == n90


def test_runs_needed_where_the_reference_rounds_down() -> None:
    # The reference's smallest cells (CV 1%/2%: "4", "3", "2") follow the normal formula;
    # with Student t, as the reference recommends, they need one more run, and the exact
    # rank test can never decide with fewer than 3 per side at alpha 0.05.
    assert runs_needed(sigma_for(0.01), 1.02) == 5
    assert runs_needed(sigma_for(0.02), 1.05) == 4
    assert runs_needed(sigma_for(0.01), 1.10) == 3
    assert runs_needed(sigma_for(0.03), 1.10) == 3


def brute_runs(sigma: float, effect: float, alpha: float, power: float) -> int:
    # Scan upwards from the normal-theory answer, a lower bound since t quantiles exceed z.
    z = scipy_stats.norm.ppf(1 - alpha) + scipy_stats.norm.ppf(power)
    n = max(2, math.floor(2 * (z * sigma / math.log(effect)) ** 2))
    while True:
        df = 2 * n - 2
        quantiles = scipy_stats.t.ppf(1 - alpha, df) + scipy_stats.t.ppf(power, df)
        if quantiles * sigma * math.sqrt(2 / n) <= abs(math.log(effect)):
            return n
        n += 1


def test_runs_needed_matches_brute_force() -> None:
    rng = random.Random(0)
    from pytest_sglang.verdicts.stats import min_runs

    for _ in range(200):
        sigma = rng.uniform(0.002, 0.08)
        effect = math.exp(rng.uniform(-0.2, 0.2))
        alpha = rng.choice([0.01, 0.05, 0.1])
        power = rng.choice([0.5, 0.8, 0.9])
        expected = max(brute_runs(sigma, effect, alpha, power), min_runs(alpha))
        if expected > 3000:
            continue
        assert runs_needed(sigma, effect, alpha=alpha, power=power) == expected


def test_runs_needed_edges() -> None:
    assert runs_needed(0.03, 1.0) is None  # no effect: never decided
    assert runs_needed(0.0, 1.01) == 3  # no noise: the rank test's minimum
    assert runs_needed(0.05, 1.0001) is None  # beyond the limit
    assert runs_needed(0.03, 0.95) == runs_needed(0.03, 1 / 0.95)  # direction ignored
    with pytest.raises(ValueError):
        runs_needed(-0.1, 1.05)
    with pytest.raises(ValueError):
        runs_needed(0.03, 0.0)
    with pytest.raises(ValueError, match="power"):
        runs_needed(0.03, 1.05, power=1.0)


def test_min_detectable_ratio_formula() -> None:
    sigma = 0.03
    for n in (3, 5, 8, 20):
        df = 2 * n - 2
        expected = math.expm1(
            (scipy_stats.t.ppf(0.95, df) + scipy_stats.t.ppf(0.8, df)) * sigma * math.sqrt(2 / n)
        )
        assert min_detectable_ratio(sigma, n, n) == pytest.approx(expected, rel=1e-9)
    # Unequal sizes use sqrt(1/n_a + 1/n_b) and df = n_a + n_b - 2.
    df = 10
    expected = math.expm1(
        (scipy_stats.t.ppf(0.95, df) + scipy_stats.t.ppf(0.8, df))
        * sigma
        * math.sqrt(1 / 4 + 1 / 8)
    )
    assert min_detectable_ratio(sigma, 4, 8) == pytest.approx(expected, rel=1e-9)


def test_min_detectable_ratio_and_runs_needed_are_inverse() -> None:
    sigma = 0.025
    for n in (4, 6, 9, 15, 40):
        mde = min_detectable_ratio(sigma, n, n)
        assert runs_needed(sigma, 1 + mde * 1.0001) == n
        assert runs_needed(sigma, 1 + mde * 0.999) == n + 1


def test_min_detectable_ratio_errors() -> None:
    with pytest.raises(ValueError):
        min_detectable_ratio(0.03, 1, 1)
    with pytest.raises(ValueError, match="alpha"):
        min_detectable_ratio(0.03, 5, 5, alpha=0.6)


def test_log_spread() -> None:
    a = [100.0, 102.0, 98.0]
    b = [50.0, 51.0, 49.0, 50.5]
    logs_a = [math.log(x) for x in a]
    logs_b = [math.log(x) for x in b]

    def ss(v: list[float]) -> float:
        mean = sum(v) / len(v)
        return sum((x - mean) ** 2 for x in v)

    assert log_spread(a, b) == pytest.approx(math.sqrt((ss(logs_a) + ss(logs_b)) / 5), rel=1e-12)
    assert log_spread([5.0] * 3, [7.0] * 3) == 0.0
    with pytest.raises(ValueError):
        log_spread([1.0], [2.0])
