"""Small-sample statistics for noisy performance comparisons, standard library only.

The unit of replication is one whole benchmark run, so a sample is a handful of numbers
(typically 3 to 20 per side). That rules out the large-sample shortcuts: every p-value here
comes from an *exact* null distribution, and every confidence bound reports the confidence it
actually achieves, which at these sizes is a step function of the sample sizes.

* :func:`percentile`: linear interpolation between order statistics (numpy's default).
* :func:`mann_whitney_u`: exact one-sided Mann-Whitney U test, ties included.
* :func:`hodges_lehmann_ratio`: the Hodges-Lehmann ratio of two positive samples with its
  exact distribution-free one-sided bounds (Bauer 1972; Hollander & Wolfe, *Nonparametric
  Statistical Methods*, section 4.3).
* :func:`min_p_value` and :func:`min_runs`: what the sample sizes can ever show.
* :func:`t_sf`, :func:`t_ppf`, :func:`min_detectable_ratio`, :func:`runs_needed`: sample-size
  planning on the log scale (the two-sample t approximation of the reference notes, Part 2.3).

All functions are pure and free of I/O.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from fractions import Fraction
from math import comb
from typing import Literal, NamedTuple

__all__ = [
    "MannWhitneyResult",
    "RatioEstimate",
    "hodges_lehmann_ratio",
    "log_spread",
    "mann_whitney_u",
    "min_detectable_ratio",
    "min_p_value",
    "min_runs",
    "percentile",
    "runs_needed",
    "t_ppf",
    "t_sf",
]

Alternative = Literal["greater", "less"]


# --------------------------------------------------------------------------------------------
# Percentiles


def percentile(values: Sequence[float], q: float) -> float:
    """Return the *q*-th percentile of *values*, interpolating linearly between order statistics.

    This is numpy's default (``method="linear"``, Hyndman & Fan type 7): with the values sorted
    as ``x[0] <= ... <= x[n-1]`` and ``h = (n - 1) * q / 100``, the result is
    ``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``.

    :param values: the sample; any order, at least one value, no NaN.
    :param q: the percentile, from 0 to 100 inclusive (50 is the median).
    :returns: the interpolated percentile.
    :raises ValueError: if *values* is empty or holds NaN, or *q* is outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:  # also rejects NaN
        raise ValueError(f"percentile q must be between 0 and 100, got {q!r}")
    if len(values) == 0:
        raise ValueError("percentile of an empty sample is undefined")
    xs = sorted(values)
    if any(math.isnan(x) for x in xs):
        raise ValueError("percentile: the sample holds NaN")
    h = (len(xs) - 1) * (q / 100.0)  # numpy's order of operations, for identical rounding
    lo = math.floor(h)
    if lo >= len(xs) - 1:
        return float(xs[-1])
    frac = h - lo
    below, above = float(xs[lo]), float(xs[lo + 1])
    if frac == 0.0 or below == above:
        return below
    # Same lerp as numpy: anchored on the nearer end, so q=100-ish values never overshoot.
    diff = above - below
    return above - diff * (1.0 - frac) if frac >= 0.5 else below + diff * frac


# --------------------------------------------------------------------------------------------
# Exact Mann-Whitney U


class MannWhitneyResult(NamedTuple):
    """The outcome of :func:`mann_whitney_u`; unpacks as ``(u, p)``."""

    #: ``#{(i, j): a_i > b_j} + 0.5 * #{(i, j): a_i == b_j}`` (scipy's ``U1`` for ``x=a``).
    u: float
    #: The exact one-sided p-value.
    p: float


def min_p_value(n_a: int, n_b: int) -> float:
    """Return the smallest one-sided p-value the exact Mann-Whitney test can give.

    It is reached only by perfect separation (every value of one sample beyond every value of
    the other) and equals ``1 / C(n_a + n_b, n_a)``: 0.05 for 3 runs against 3, 0.0143 for
    4 against 4, 0.0040 for 5 against 5. Ties across the samples only make it larger. A
    test at level ``alpha`` can never pass when this exceeds ``alpha``.

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

    The generating function of U is the Gaussian binomial coefficient
    ``[m+n choose m]_q = prod_{i=1..m} (1 - q^(n+i)) / (1 - q^i)``, so the table costs m
    multiplications and m divisions by two-term polynomials: O(m * m * n) integer additions,
    against O(m * n * m * n) for the textbook recurrence. Python's integers keep it exact.
    """
    size = m * n + 1
    poly = [0] * size
    poly[0] = 1
    for i in range(1, m + 1):
        # Multiply by (1 - q^(n+i)), truncated at degree m*n (the quotient is a polynomial
        # of that degree, so the truncation loses nothing).
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

    The conditional (permutation) null distribution: the pooled values are fixed and fall in
    tie groups of the given sizes, in ascending order; under H0 each of the
    ``C(m + n, m)`` ways to label m of them "A" is equally likely. Placing ``k`` A-labels in a
    group of size ``t`` with ``below`` B-values in earlier groups adds
    ``k * below + k * (t - k) / 2`` to U_A, so a dynamic programme over the groups, keyed by
    (A-labels used, 2U so far), counts them with ``C(t, k)`` ways each. 2U keeps it integral.
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
    it is ``P0(U <= U_obs)``.

    The null distribution is always exact, never the normal approximation:

    * without ties it is the classical distribution (Mann & Whitney 1947), and the p-value
      equals ``scipy.stats.mannwhitneyu(a, b, alternative=..., method="exact")``;
    * with ties it is the exact *conditional* distribution given the tie pattern, i.e. over
      all ``C(m + n, m)`` ways to split the pooled values (with their ties) into samples of
      the observed sizes, with mid-rank scoring. This is what
      ``scipy.stats.permutation_test`` computes with the U statistic and all permutations,
      and what SAS ``PROC NPAR1WAY`` reports as the exact Wilcoxon test. scipy's
      ``mannwhitneyu(method="exact")`` differs here: it ignores ties, truncating the tied
      U to an integer and reading the no-ties table, which is not the test's exact null
      distribution when ties occur (it can err in either direction).

    Cost: O(m^2 n) integer operations without ties, O((m + n) m^2 n) with them; results are
    cached per (sizes, tie pattern). Fine for the tens of runs a benchmark has.

    :param a: the first sample (at least one value, no NaN).
    :param b: the second sample (at least one value, no NaN).
    :param alternative: ``"greater"`` (H1: *a* stochastically larger) or ``"less"``.
    :returns: ``(u, p)`` as a :class:`MannWhitneyResult`.
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


def _positive_sample(name: str, values: Sequence[float]) -> list[float]:
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

    The Hodges-Lehmann estimator of the shift between ``log a`` and ``log b``, reported as a
    ratio: noise in throughput and latency is multiplicative, so the shift model holds on
    the log scale. With the ``m * n`` pairwise ratios ``a_i / b_j`` sorted as
    ``r_(1) <= ... <= r_(mn)`` and ``c`` the largest integer with ``P0(U <= c - 1) <= alpha``
    under the exact Mann-Whitney null distribution (no ties), the bounds are

    * lower: ``r_(c)``, and upper: ``r_(mn + 1 - c)`` (Bauer 1972; Hollander & Wolfe,
      section 4.3; SAS ``PROC NPAR1WAY`` ``EXACT HL``), each at one-sided confidence
      ``1 - P0(U <= c - 1)`` (the discreteness makes it at least ``1 - alpha``); together
      they are a two-sided interval at ``1 - 2 * (1 - confidence)``.

    The bounds are dual to :func:`mann_whitney_u`: for tie-free data, ``lower > r0`` exactly
    when the one-sided "greater" test of *a* against ``r0 * b`` gives ``p <= alpha``, and
    ``upper < r0`` exactly when the "less" test does.

    Ties: the critical count always comes from the no-ties table, as in Bauer's method and
    R's ``wilcox.test(conf.int=TRUE)``; it does not depend on the data. SAS's "Exact" HL
    limits instead condition on the data's tie pattern, which can move them one order
    statistic inwards (Hollander & Wolfe's chicken data, with two tied pairs inside one
    sample: SAS exact 95% limits ``D(19), D(63)``, ours ``D(18), D(64)``, the same order
    statistics as SAS's Moses limits). Runs measured on a continuous scale do not tie.

    :param a: the numerator sample (positive finite values).
    :param b: the denominator sample (positive finite values).
    :param alpha: the one-sided error rate of each bound, in (0, 0.5).
    :returns: a :class:`RatioEstimate`.
    :raises ValueError: on empty samples, non-positive or non-finite values, or a bad *alpha*.
    """
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha!r}")
    xs = _positive_sample("a", a)
    ys = _positive_sample("b", b)
    m, n = len(xs), len(ys)
    ratios = sorted(x / y for x in xs for y in ys)
    estimate = _median_sorted(ratios)
    c, confidence = _critical_count(m, n, alpha)
    if c == 0:
        return RatioEstimate(estimate, 0.0, math.inf, 1.0)
    return RatioEstimate(estimate, ratios[c - 1], ratios[m * n - c], confidence)


# --------------------------------------------------------------------------------------------
# Student t, for sample-size planning


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = 1.0
    d = 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for i in range(1, 10_000):
        i2 = 2 * i
        num = i * (b - i) * x / ((qam + i2) * (a + i2))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        num = -(a + i) * (qab + i) * x / ((a + i2) * (qap + i2))
        d = 1.0 + num * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + num / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularized incomplete beta ``I_x(a, b)``, with ``y = 1 - x`` computed by the caller.

    Taking ``1 - x`` from the caller keeps its precision when x is close to 1 (a t statistic
    near zero), where subtracting here would cancel.
    """
    if x <= 0.0:
        return 0.0
    if y <= 0.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    front = math.exp(log_front)
    # The continued fraction converges fast only on this side of the mean; use symmetry.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def t_sf(t: float, df: float) -> float:
    """Return ``P(T > t)`` for Student's t distribution with *df* degrees of freedom.

    Computed as ``0.5 * I_{df / (df + t^2)}(df / 2, 1 / 2)`` for ``t > 0`` (and by symmetry
    otherwise), with the regularized incomplete beta by Lentz's continued fraction; agrees
    with ``scipy.stats.t.sf`` to about 1e-12.

    :param t: the point.
    :param df: degrees of freedom, positive.
    :returns: the upper tail probability.
    :raises ValueError: if *df* is not positive or *t* is NaN.
    """
    if not df > 0.0:
        raise ValueError(f"degrees of freedom must be positive, got {df!r}")
    if math.isnan(t):
        raise ValueError("t_sf: t is NaN")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    t2 = t * t
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t2), t2 / (df + t2))
    return tail if t > 0 else 1.0 - tail


def _t_pdf(t: float, df: float) -> float:
    log_norm = math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0) - 0.5 * math.log(df * math.pi)
    return math.exp(log_norm - (df + 1.0) / 2.0 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Return the *p*-quantile of Student's t distribution with *df* degrees of freedom.

    Newton's method on :func:`t_sf` from the normal quantile, safeguarded by bisection
    inside a bracket, to full double precision; agrees with ``scipy.stats.t.ppf`` to about
    1e-10 (1e-8 at hundreds of thousands of degrees of freedom).

    :param p: the probability, in (0, 1).
    :param df: degrees of freedom, positive.
    :returns: ``t`` with ``P(T <= t) = p``.
    :raises ValueError: if *p* is outside (0, 1) or *df* is not positive.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must be between 0 and 1, got {p!r}")
    if not df > 0.0:
        raise ValueError(f"degrees of freedom must be positive, got {df!r}")
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    target = 1.0 - p  # upper tail
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > target:
        lo, hi = hi, hi * 2.0
    t = min(max(statistics.NormalDist().inv_cdf(p), lo), hi)
    for _ in range(100):
        excess = t_sf(t, df) - target  # > 0 means t is still too small
        if excess > 0.0:
            lo = t
        else:
            hi = t
        step = excess / _t_pdf(t, df)
        guess = t + step
        if not lo < guess < hi:  # Newton left the bracket: bisect instead
            guess = (lo + hi) / 2.0
        if abs(guess - t) <= 4e-16 * max(1.0, abs(t)) or hi - lo <= 4e-16 * hi:
            return guess
        t = guess
    return t


def log_spread(a: Sequence[float], b: Sequence[float]) -> float:
    """Return the pooled standard deviation of ``log a`` and ``log b``.

    Each sample is centred on its own mean and the squared deviations are pooled over
    ``len(a) + len(b) - 2`` degrees of freedom. For small CVs this is about the coefficient
    of variation per run (``sqrt(log(1 + CV^2))`` for log-normal noise).

    :param a: the first sample (positive finite values).
    :param b: the second sample (positive finite values).
    :returns: the pooled standard deviation of the logs.
    :raises ValueError: on non-positive values or fewer than three values in all.
    """
    logs_a = [math.log(x) for x in _positive_sample("a", a)]
    logs_b = [math.log(x) for x in _positive_sample("b", b)]
    df = len(logs_a) + len(logs_b) - 2
    if df < 1:
        raise ValueError("a pooled spread needs at least three values in all")
    ss = 0.0
    for logs in (logs_a, logs_b):
        mean = statistics.fmean(logs)
        ss += sum((v - mean) ** 2 for v in logs)
    return math.sqrt(ss / df)


def _check_plan(sigma: float, alpha: float, power: float) -> None:
    if not (sigma >= 0.0 and math.isfinite(sigma)):
        raise ValueError(f"sigma must be a finite non-negative number, got {sigma!r}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha!r}")
    if not 0.5 <= power < 1.0:
        raise ValueError(f"power must be at least 0.5 and below 1, got {power!r}")


def min_detectable_ratio(
    sigma: float, n_a: int, n_b: int, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Return the smallest relative effect these sample sizes detect with the given power.

    ``exp((t_{1-alpha, df} + t_{power, df}) * sigma * sqrt(1/n_a + 1/n_b)) - 1`` with
    ``df = n_a + n_b - 2``: the one-sided two-sample t approximation on the log scale
    (reference notes, Part 2.3). The rank test needs about 5% more runs than this on clean
    normal noise (asymptotic relative efficiency 3/pi) and is more powerful with outliers;
    at the smallest sizes its discreteness costs more, so read the result as a guide.

    :param sigma: standard deviation of log values per run (about the CV).
    :param n_a: runs on one side.
    :param n_b: runs on the other side (``n_a + n_b >= 3``).
    :param alpha: one-sided significance level.
    :param power: the probability of detecting an effect of the returned size.
    :returns: the effect as a fraction (0.05 means a 5% difference in the ratio).
    :raises ValueError: on bad arguments.
    """
    _check_plan(sigma, alpha, power)
    if n_a < 1 or n_b < 1 or n_a + n_b < 3:
        raise ValueError(f"need at least one run per side and three in all, got {n_a}, {n_b}")
    df = n_a + n_b - 2
    quantiles = t_ppf(1.0 - alpha, df) + t_ppf(power, df)
    return math.expm1(quantiles * sigma * math.sqrt(1.0 / n_a + 1.0 / n_b))


def runs_needed(
    sigma: float,
    effect: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    limit: int = 100_000,
) -> int | None:
    """Return the runs per side to detect a true ratio *effect* with the given power.

    The smallest ``n`` (equal on both sides, and never below :func:`min_runs` for *alpha*)
    with ``(t_{1-alpha, 2n-2} + t_{power, 2n-2}) * sigma * sqrt(2/n) <= |log(effect)|``:
    the reference's ``n = 2 (z_{1-alpha} + z_{power})^2 sigma^2 / delta^2`` refined with
    Student t. At CV 3% and a 5% effect this gives 6, at CV 5% and 5% it gives 14.

    :param sigma: standard deviation of log values per run (about the CV).
    :param effect: the true ratio to detect, e.g. 1.05 (or 0.95: the direction is ignored).
    :param alpha: one-sided significance level.
    :param power: the probability of detecting it.
    :param limit: the most runs worth reporting.
    :returns: runs per side, or None when *effect* is 1 or more than *limit* runs would be
        needed.
    :raises ValueError: on bad arguments.
    """
    _check_plan(sigma, alpha, power)
    if not (effect > 0.0 and math.isfinite(effect)):
        raise ValueError(f"effect must be a positive ratio, got {effect!r}")
    delta = abs(math.log(effect))
    floor = min_runs(alpha)
    if delta == 0.0:
        return None
    if sigma == 0.0:
        return floor

    def enough(n: int) -> bool:
        df = 2 * n - 2
        return (t_ppf(1.0 - alpha, df) + t_ppf(power, df)) * sigma * math.sqrt(2.0 / n) <= delta

    # Student t quantiles exceed the normal ones, so the normal-theory answer is a lower
    # bound on n: start there and search upwards (the left side falls monotonically in n).
    normal = statistics.NormalDist()
    z = normal.inv_cdf(1.0 - alpha) + normal.inv_cdf(power)
    n_z = 2.0 * (z * sigma / delta) ** 2
    if n_z > limit:
        return None
    lo = max(floor, 2, math.ceil(n_z))
    if enough(lo):
        return lo
    hi = lo + max(1, lo // 4)
    while not enough(hi):
        if hi > limit:
            return None
        lo, hi = hi, hi + max(1, hi // 4)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return hi if hi <= limit else None
