"""Exact rank statistics for small samples of whole runs, standard library only.

A sample is a handful of runs, so every p-value comes from an exact null distribution and
every bound reports the confidence it achieves. The method is in ``docs/statistics.md``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from fractions import Fraction
from math import comb
from typing import Literal, NamedTuple

__all__ = [
    "Alternative",
    "MannWhitneyResult",
    "RatioEstimate",
    "hodges_lehmann_ratio",
    "mann_whitney_u",
    "min_p_value",
    "min_runs",
    "positive_sample",
]

Alternative = Literal["greater", "less"]


class MannWhitneyResult(NamedTuple):
    """The outcome of :func:`mann_whitney_u`; unpacks as ``(u, p)``."""

    #: ``#{(i, j): a_i > b_j} + 0.5 * #{(i, j): a_i == b_j}`` (scipy's ``U1`` for ``x=a``).
    u: float
    #: The exact one-sided p-value.
    p: float


def min_p_value(n_a: int, n_b: int) -> float:
    """Return the smallest one-sided p-value the exact Mann-Whitney test can give.

    Reached only by perfect separation; a test at level ``alpha`` can never pass when this
    exceeds ``alpha``.

    :param n_a: size of the first sample, at least 1.
    :param n_b: size of the second sample, at least 1.
    :returns: ``1 / C(n_a + n_b, n_a)``.
    :raises ValueError: if a size is below 1.
    """
    if n_a < 1 or n_b < 1:
        raise ValueError(f"sample sizes must be at least 1, got {n_a} and {n_b}")
    return 1.0 / comb(n_a + n_b, n_a)


def min_runs(alpha: float, other: int | None = None) -> int:
    """Return the fewest runs per side at which the exact one-sided test can reach *alpha*.

    :param alpha: the significance level, in (0, 1).
    :param other: if given, the size of the other sample: the result is then the fewest runs
        of this side that, against *other* runs, can reach *alpha*.
    :returns: the smallest ``n`` with ``min_p_value(n, n) <= alpha`` (or
        ``min_p_value(n, other) <= alpha``); 3 at ``alpha = 0.05``, 4 at 0.02, 6 at 0.002.
    :raises ValueError: if *alpha* is outside (0, 1) or *other* is below 1.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    if other is not None and other < 1:
        raise ValueError(f"the other sample size must be at least 1, got {other}")
    n = 1
    while min_p_value(n, n if other is None else other) > alpha:
        n += 1
    return n


@functools.lru_cache(maxsize=128)
def _no_tie_counts(m: int, n: int) -> tuple[int, ...]:
    """Return ``counts[u]``: arrangements of m + n distinct values with ``U_A = u``.

    Expands the Gaussian binomial coefficient (``docs/statistics.md``), exactly.
    """
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, m + 1):
        # Multiply by (1 - q^(n+i)), truncated at degree m*n (the quotient's degree).
        step = n + i
        for k in range(size - 1, step - 1, -1):
            poly[k] -= poly[k - step]
        # Divide by (1 - q^i): a running sum with stride i.
        for k in range(i, size):
            poly[k] += poly[k - i]
    return tuple(poly)


@functools.lru_cache(maxsize=256)
def _tied_counts(m: int, groups: tuple[int, ...]) -> tuple[int, ...]:
    """Return ``counts[h]``: label assignments with ``2 * U_A = h`` for the given tie pattern.

    The exact conditional null distribution, by dynamic programming over the tie groups
    (their sizes in ascending order of value; ``docs/statistics.md``). 2U keeps it integral.
    """
    total = sum(groups)
    n = total - m
    size = 2 * m * n + 1
    dp: list[list[int]] = [[0] * size for _ in range(m + 1)]
    dp[0][0] = 1
    seen = 0  # values in the groups processed so far
    for t in groups:
        new: list[list[int]] = [[0] * size for _ in range(m + 1)]
        for j in range(min(m, seen) + 1):
            row = dp[j]
            below = seen - j  # B-values below this group
            if below > n:
                continue
            top = 2 * j * below  # the largest 2U so far: every pair seen is an A-win
            for k in range(min(t, m - j) + 1):
                if t - k > n - below:  # not enough B-labels left for the rest of the group
                    continue
                ways = comb(t, k)
                shift = 2 * k * below + k * (t - k)
                target = new[j + k]
                for h in range(top + 1):
                    c = row[h]
                    if c:
                        target[h + shift] += c * ways
        dp = new
        seen += t
    return tuple(dp[m])


def _check_sample(name: str, values: Sequence[float]) -> list[float]:
    xs = [float(v) for v in values]
    if not xs:
        raise ValueError(f"sample {name} is empty")
    if any(math.isnan(x) for x in xs):
        raise ValueError(f"sample {name} holds NaN")
    return xs


def mann_whitney_u(
    a: Sequence[float], b: Sequence[float], alternative: Alternative = "greater"
) -> MannWhitneyResult:
    """Run the exact one-sided Mann-Whitney U (Wilcoxon rank-sum) test of *a* against *b*.

    ``U = #{(i, j): a_i > b_j} + 0.5 * #{(i, j): a_i == b_j}``. With ``alternative="greater"``
    the p-value is ``P0(U >= U_obs)`` (evidence that *a* tends to be larger); with ``"less"``
    it is ``P0(U <= U_obs)``. The null distribution is exact, conditional on the tie pattern
    when there are ties (``docs/statistics.md``).

    :param a: the first sample (at least one value, no NaN).
    :param b: the second sample (at least one value, no NaN).
    :param alternative: ``"greater"`` (H1: *a* stochastically larger) or ``"less"``.
    :raises ValueError: on an empty sample, NaN, or an unknown *alternative*.
    """
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative must be 'greater' or 'less', got {alternative!r}")
    xs = _check_sample("a", a)
    ys = _check_sample("b", b)
    m, n = len(xs), len(ys)
    wins = ties = 0
    for x in xs:
        for y in ys:
            if x > y:
                wins += 1
            elif x == y:
                ties += 1
    h_obs = 2 * wins + ties  # 2U, an integer

    pooled = sorted(xs + ys)
    groups: list[int] = []
    previous: float | None = None
    for v in pooled:
        if groups and v == previous:
            groups[-1] += 1
        else:
            groups.append(1)
        previous = v
    if len(groups) == m + n:
        # No ties: U is an integer and the classical table applies.
        table = _no_tie_counts(m, n)
        u_obs = h_obs // 2
        tail = sum(table[u_obs:]) if alternative == "greater" else sum(table[: u_obs + 1])
    else:
        counts = _tied_counts(m, tuple(groups))
        tail = sum(counts[h_obs:]) if alternative == "greater" else sum(counts[: h_obs + 1])
    # Exact integers until this single, correctly rounded division.
    return MannWhitneyResult(h_obs / 2, tail / comb(m + n, m))


# --------------------------------------------------------------------------------------------
# Hodges-Lehmann ratio with exact bounds


class RatioEstimate(NamedTuple):
    """The Hodges-Lehmann ratio of two samples with its exact one-sided bounds."""

    #: ``exp(median(log a_i - log b_j))``: the median of the pairwise ratios, taking the
    #: geometric mean of the middle two when there are an even number of pairs.
    estimate: float
    #: One-sided lower bound: ``P(true ratio >= lower) >= confidence``. 0.0 when the sample
    #: sizes cannot support any bound at this level.
    lower: float
    #: One-sided upper bound: ``P(true ratio <= upper) >= confidence``; ``math.inf`` when no
    #: bound is possible.
    upper: float
    #: The confidence each one-sided bound achieves, ``1 - P0(U <= c - 1) >= 1 - alpha``
    #: (exact for continuous data; 1.0 when no bound is possible).
    confidence: float


def positive_sample(name: str, values: Sequence[float]) -> list[float]:
    xs = _check_sample(name, values)
    for x in xs:
        if not (x > 0.0 and math.isfinite(x)):
            raise ValueError(
                f"sample {name} must hold positive finite values for a ratio, got {x!r}"
            )
    return xs


def _median_sorted(xs: Sequence[float]) -> float:
    k = len(xs)
    mid = k // 2
    if k % 2:
        return xs[mid]
    # Geometric mean of the middle two, i.e. the mean on the log scale where HL is defined.
    return math.sqrt(xs[mid - 1] * xs[mid])


@functools.lru_cache(maxsize=256)
def _critical_count(m: int, n: int, alpha: float) -> tuple[int, float]:
    """Return ``(c, confidence)``: the largest ``c`` with ``P0(U <= c - 1) <= alpha``."""
    table = _no_tie_counts(m, n)
    total = comb(m + n, m)
    # Exact rational threshold: the same decision as ``p <= alpha`` without rounding drift.
    limit = Fraction(alpha) * total
    cum = 0
    c = 0
    for u in range(m * n + 1):
        if cum + table[u] > limit:
            break
        cum += table[u]
        c = u + 1
    return c, 1.0 - cum / total


def hodges_lehmann_ratio(
    a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05
) -> RatioEstimate:
    """Estimate the ratio of *a* to *b* with exact distribution-free one-sided bounds.

    The Hodges-Lehmann shift of ``log a`` against ``log b``, as a ratio (noise in throughput
    and latency is multiplicative). The bounds are order statistics of the pairwise ratios
    (Bauer 1972), dual to :func:`mann_whitney_u` for tie-free data; ``docs/statistics.md``
    gives the construction and how ties are handled.

    :param a: the numerator sample (positive finite values).
    :param b: the denominator sample (positive finite values).
    :param alpha: the one-sided error rate of each bound, in (0, 0.5).
    :raises ValueError: on empty samples, non-positive or non-finite values, or a bad *alpha*.
    """
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha!r}")
    xs = positive_sample("a", a)
    ys = positive_sample("b", b)
    m, n = len(xs), len(ys)
    ratios = sorted(x / y for x in xs for y in ys)
    estimate = _median_sorted(ratios)
    c, confidence = _critical_count(m, n, alpha)
    if c == 0:
        return RatioEstimate(estimate, 0.0, math.inf, 1.0)
    return RatioEstimate(estimate, ratios[c - 1], ratios[m * n - c], confidence)
