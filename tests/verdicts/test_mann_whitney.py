"""Exact one-sided Mann-Whitney U: scipy, brute force and a published example as oracles."""

from __future__ import annotations

import functools
import itertools
import math
import random
from math import comb

import numpy as np
import pytest
from scipy import stats as scipy_stats

from pytest_sglang.verdicts import stats
from pytest_sglang.verdicts.stats import mann_whitney_u, min_p_value, min_runs


def brute_force_p(a: list[float], b: list[float], alternative: str) -> float:
    """Enumerate every split of the pooled values: the exact conditional distribution."""

    def u_stat(x: list[float], y: list[float]) -> float:
        return sum((xi > yi) + 0.5 * (xi == yi) for xi in x for yi in y)

    pooled = a + b
    observed = u_stat(a, b)
    hits = total = 0
    for chosen in itertools.combinations(range(len(pooled)), len(a)):
        rest = [pooled[i] for i in range(len(pooled)) if i not in chosen]
        u = u_stat([pooled[i] for i in chosen], rest)
        total += 1
        hits += u >= observed if alternative == "greater" else u <= observed
    return hits / total


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_matches_scipy_exact_without_ties(alternative: str) -> None:
    rng = random.Random(2024)
    for _ in range(400):
        m, n = rng.randint(1, 14), rng.randint(1, 14)
        shift = rng.choice([0.0, 0.5, 1.0, 2.0])
        a = [rng.gauss(shift, 1) for _ in range(m)]
        b = [rng.gauss(0, 1) for _ in range(n)]
        u, p = mann_whitney_u(a, b, alternative)  # type: ignore[arg-type]
        ref = scipy_stats.mannwhitneyu(a, b, alternative=alternative, method="exact")
        assert u == ref.statistic
        assert p == pytest.approx(float(ref.pvalue), rel=1e-12)


def test_matches_scipy_at_typical_sizes() -> None:
    # The sizes a benchmark has: 3..20 runs per side, including unbalanced designs.
    rng = random.Random(5)
    for m in (3, 4, 5, 6, 8, 10, 15, 20):
        for n in (3, 5, 10, 20):
            a = [rng.lognormvariate(0.02, 0.03) for _ in range(m)]
            b = [rng.lognormvariate(0, 0.03) for _ in range(n)]
            for alternative in ("greater", "less"):
                ref = scipy_stats.mannwhitneyu(a, b, alternative=alternative, method="exact")
                p = mann_whitney_u(a, b, alternative).p
                assert p == pytest.approx(float(ref.pvalue), rel=1e-12)


def test_ties_match_brute_force_enumeration() -> None:
    rng = random.Random(11)
    for _ in range(150):
        m, n = rng.randint(1, 6), rng.randint(1, 6)
        levels = rng.randint(1, 4)
        a = [float(rng.randint(0, levels)) for _ in range(m)]
        b = [float(rng.randint(0, levels)) for _ in range(n)]
        for alternative in ("greater", "less"):
            expected = brute_force_p(a, b, alternative)
            assert mann_whitney_u(a, b, alternative).p == pytest.approx(expected, abs=1e-14)


def test_ties_match_scipy_permutation_test() -> None:
    # scipy.stats.permutation_test over all splits, with the U statistic, is an independent
    # implementation of the same exact conditional distribution.
    def u_statistic(x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
        diff = x[..., :, None] - y[..., None, :]
        return np.sum(diff > 0, axis=(-2, -1)) + 0.5 * np.sum(diff == 0, axis=(-2, -1))

    rng = random.Random(3)
    for _ in range(25):
        m, n = rng.randint(2, 6), rng.randint(2, 6)
        a = [float(rng.randint(0, 3)) for _ in range(m)]
        b = [float(rng.randint(0, 3)) for _ in range(n)]
        for alternative in ("greater", "less"):
            ref = scipy_stats.permutation_test(
                (a, b),
                u_statistic,
                permutation_type="independent",
                alternative=alternative,
                n_resamples=np.inf,
                vectorized=True,
            )
            p = mann_whitney_u(a, b, alternative).p
            assert p == pytest.approx(float(ref.pvalue), abs=1e-12)


def test_sas_exact_wilcoxon_example_with_heavy_ties() -> None:
    # SAS/STAT PROC NPAR1WAY, "Exact Wilcoxon Two-Sample Test" (the React data: reaction
    # times under two stimulants, 13 + 6 subjects, heavily tied). Published: rank sum of
    # stimulant 2 = 79.5, exact one-sided p = 0.0527, two-sided 0.1054.
    stim1 = [1.94, 1.94, 2.92, 2.92, 2.92, 2.92, 3.27, 3.27, 3.27, 3.27, 3.70, 3.70, 3.74]
    stim2 = [3.27, 3.27, 3.27, 3.70, 3.70, 3.74]
    u, p = mann_whitney_u(stim2, stim1, "greater")
    assert u + 6 * 7 / 2 == 79.5  # U plus n(n+1)/2 is the rank sum
    assert round(p, 4) == 0.0527
    assert round(2 * p, 4) == 0.1054


def test_scipy_exact_differs_with_ties_and_why() -> None:
    # scipy's method="exact" ignores ties: it truncates U to an integer and reads the no-ties
    # table. On the SAS example that is not the exact p-value.
    stim1 = [1.94, 1.94, 2.92, 2.92, 2.92, 2.92, 3.27, 3.27, 3.27, 3.27, 3.70, 3.70, 3.74]
    stim2 = [3.27, 3.27, 3.27, 3.70, 3.70, 3.74]
    ref = scipy_stats.mannwhitneyu(stim2, stim1, alternative="greater", method="exact")
    table = stats._no_tie_counts(6, 13)
    truncated = sum(table[int(ref.statistic) :]) / comb(19, 6)
    assert float(ref.pvalue) == pytest.approx(truncated, rel=1e-12)
    assert mann_whitney_u(stim2, stim1).p != pytest.approx(float(ref.pvalue), rel=1e-3)


def test_tie_programme_equals_classical_table_without_ties() -> None:
    for m in range(1, 8):
        for n in range(1, 8):
            classical = stats._no_tie_counts(m, n)
            tied = stats._tied_counts(m, (1,) * (m + n))
            # The tie programme counts 2U; without ties only even entries are used.
            assert tied[::2] == classical
            assert not any(tied[1::2])
            assert sum(classical) == comb(m + n, m)


def test_classical_table_matches_recurrence() -> None:
    # f(m, n, u) = f(m-1, n, u-n) + f(m, n-1, u) (Mann & Whitney 1947).
    @functools.cache
    def f(m: int, n: int, u: int) -> int:
        if u < 0:
            return 0
        if m == 0 or n == 0:
            return 1 if u == 0 else 0
        return f(m - 1, n, u - n) + f(m, n - 1, u)

    for m, n in [(3, 3), (4, 7), (9, 9), (12, 5)]:
        assert list(stats._no_tie_counts(m, n)) == [f(m, n, u) for u in range(m * n + 1)]


def test_statistic_is_scipys_u1() -> None:
    a, b = [1.0, 2.0, 3.0, 3.0], [0.5, 3.0, 4.0]
    u, _ = mann_whitney_u(a, b)
    assert u == float(scipy_stats.mannwhitneyu(a, b).statistic) == 5.0


def test_perfect_separation_reaches_min_p() -> None:
    for n in range(2, 9):
        a = [10.0 + i for i in range(n)]
        b = [float(i) for i in range(n)]
        assert mann_whitney_u(a, b, "greater").p == pytest.approx(min_p_value(n, n), rel=1e-15)
        assert mann_whitney_u(a, b, "less").p == 1.0


def test_min_p_value_table_from_the_reference() -> None:
    # Reference notes, Part 2.2 (a): one-sided min p = 1 / C(2n, n).
    expected = {2: 0.167, 3: 0.0500, 4: 0.0143, 5: 0.0040, 6: 0.0011, 8: 0.00008, 10: 0.00001}
    for n, p in expected.items():
        assert min_p_value(n, n) == pytest.approx(p, rel=0.03, abs=5e-6)
    assert min_p_value(3, 3) == 0.05
    assert min_p_value(1, 19) == 0.05
    assert min_p_value(2, 7) == 1 / 36


def test_min_runs() -> None:
    assert min_runs(0.05) == 3
    assert min_runs(0.02) == 4
    assert min_runs(0.01) == 5  # 1/C(8, 4) = 0.0143 is not enough
    assert min_runs(0.002) == 6  # asv's threshold needs 6 per side
    assert min_runs(0.05, other=19) == 1
    assert min_runs(0.05, other=2) == 5  # 1/C(7, 2) = 1/21
    for bad in (0.0, 1.0, -1.0):
        with pytest.raises(ValueError, match="alpha"):
            min_runs(bad)
    with pytest.raises(ValueError):
        min_p_value(0, 3)


def test_symmetry_and_complement() -> None:
    rng = random.Random(8)
    for _ in range(100):
        m, n = rng.randint(1, 8), rng.randint(1, 8)
        a = [float(rng.randint(0, 6)) for _ in range(m)]
        b = [float(rng.randint(0, 6)) for _ in range(n)]
        u_ab, p_greater = mann_whitney_u(a, b, "greater")
        u_ba, p_less_swapped = mann_whitney_u(b, a, "less")
        assert u_ab + u_ba == m * n
        assert p_greater == pytest.approx(p_less_swapped, abs=1e-15)
        # P(U >= u) + P(U <= u) = 1 + P(U = u) >= 1.
        assert p_greater + mann_whitney_u(a, b, "less").p >= 1.0 - 1e-12


def test_monotone_when_a_improves() -> None:
    rng = random.Random(9)
    for _ in range(60):
        a = [rng.gauss(0, 1) for _ in range(5)]
        b = [rng.gauss(0, 1) for _ in range(6)]
        p_before = mann_whitney_u(a, b).p
        a[rng.randrange(5)] += abs(rng.gauss(0, 2))
        assert mann_whitney_u(a, b).p <= p_before + 1e-15


def test_invariant_under_monotone_transform() -> None:
    rng = random.Random(10)
    a = [rng.lognormvariate(0, 0.1) for _ in range(6)]
    b = [rng.lognormvariate(0, 0.1) for _ in range(5)]
    assert mann_whitney_u(a, b) == mann_whitney_u(
        [math.log(x) for x in a], [math.log(x) for x in b]
    )


def test_null_distribution_is_valid_at_level_alpha() -> None:
    # Size check by simulation: identically distributed samples reject at most alpha.
    rng = random.Random(12)
    rejections = sum(
        mann_whitney_u([rng.random() for _ in range(5)], [rng.random() for _ in range(5)]).p <= 0.05
        for _ in range(4000)
    )
    assert rejections / 4000 == pytest.approx(0.0476, abs=0.012)


def test_all_equal_values_give_p_one() -> None:
    assert mann_whitney_u([2.0] * 4, [2.0] * 5) == (10.0, 1.0)
    assert mann_whitney_u([2.0] * 4, [2.0] * 5, "less").p == 1.0


def test_errors() -> None:
    with pytest.raises(ValueError, match="empty"):
        mann_whitney_u([], [1.0])
    with pytest.raises(ValueError, match="NaN"):
        mann_whitney_u([1.0], [math.nan])
    with pytest.raises(ValueError, match="alternative"):
        mann_whitney_u([1.0], [2.0], "two-sided")  # type: ignore[arg-type]


def test_twenty_per_side_with_ties() -> None:
    rng = random.Random(13)
    a = [float(rng.randint(0, 10)) for _ in range(20)]
    b = [float(rng.randint(0, 10)) for _ in range(20)]
    pooled = sorted(a + b)
    groups = tuple(len(list(g)) for _, g in itertools.groupby(pooled))
    counts = stats._tied_counts(20, groups)
    assert sum(counts) == comb(40, 20)
    # With a symmetric tie pattern reversed, the distribution mirrors: 2U -> 2mn - 2U.
    assert stats._tied_counts(20, groups[::-1]) == counts[::-1]
    _, p_ab = mann_whitney_u(a, b)
    assert mann_whitney_u(b, a, "less").p == pytest.approx(p_ab, abs=1e-15)
