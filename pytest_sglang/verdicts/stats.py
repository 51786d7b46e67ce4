"""The verdicts' statistics, standard library only: exact rank tests, Student's t, binomial bounds.

A sample is a handful of whole runs, so p-values come from exact null distributions and every
bound reports the confidence it reaches; the methods are in ``docs/statistics.md``.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from fractions import Fraction
from math import comb
from typing import Literal, NamedTuple

Alternative = Literal["greater", "less"]
_TINY = 1e-300


def require(ok: bool, message: str) -> None:
    """Raise ``ValueError(message)`` unless ``ok``: the one way bad arguments are refused."""
    if not ok:
        raise ValueError(message)


def _sample(name: str, values: Sequence[float], positive: bool = False) -> list[float]:
    xs = [float(v) for v in values]
    require(bool(xs), f"sample {name} is empty")
    for x in xs if positive else ():
        require(
            x > 0.0 and math.isfinite(x),
            f"{name}: runs must be positive finite numbers (ratios are taken), got {x!r}",
        )
    require(not any(math.isnan(x) for x in xs), f"sample {name} holds NaN")
    return xs


def min_p_value(n_a: int, n_b: int) -> float:
    """Return the smallest one-sided p-value the exact test can give: ``1 / C(n_a + n_b, n_a)``."""
    require(n_a >= 1 and n_b >= 1, f"sample sizes must be at least 1, got {n_a} and {n_b}")
    return 1.0 / comb(n_a + n_b, n_a)


def min_runs(alpha: float, other: int | None = None) -> int:
    """Return the fewest runs per side (or against ``other`` runs) that can reach ``alpha``."""
    require(0.0 < alpha < 1.0, f"alpha must be between 0 and 1, got {alpha!r}")
    require(other is None or other >= 1, f"the other sample size must be at least 1: {other}")
    return next(n for n in itertools.count(1) if min_p_value(n, other or n) <= alpha)


@functools.lru_cache(maxsize=256)
def _tied_counts(m: int, groups: tuple[int, ...]) -> tuple[int, ...]:
    """Return ``counts[h]``: label assignments with ``2U = h`` for the tie pattern ``groups``."""
    n = sum(groups) - m
    size = 2 * m * n + 1
    dp = [[0] * size for _ in range(m + 1)]
    dp[0][0] = 1
    seen = 0
    for t in groups:
        new = [[0] * size for _ in range(m + 1)]
        for j in range(min(m, seen) + 1):
            below = seen - j  # b-values below this group
            for k in range(min(t, m - j) + 1):
                if below > n or t - k > n - below:
                    continue
                ways, shift = comb(t, k), 2 * k * below + k * (t - k)
                for h in range(2 * j * below + 1):
                    if dp[j][h]:
                        new[j + k][h + shift] += dp[j][h] * ways
        dp = new
        seen += t
    return tuple(dp[m])


@functools.lru_cache(maxsize=128)
def _no_tie_counts(m: int, n: int) -> tuple[int, ...]:
    """Return ``counts[u]`` for m + n distinct values: the Gaussian binomial, expanded exactly."""
    size = m * n + 1
    poly = [1] + [0] * (size - 1)
    for i in range(1, m + 1):
        for k in range(size - 1, n + i - 1, -1):  # times (1 - q^(n+i))
            poly[k] -= poly[k - n - i]
        for k in range(i, size):  # divided by (1 - q^i)
            poly[k] += poly[k - i]
    return tuple(poly)


class MannWhitneyResult(NamedTuple):
    """``u`` (``#{a_i > b_j} + #{a_i == b_j} / 2``, scipy's ``U1``) and the exact one-sided p."""

    u: float
    p: float


def mann_whitney_u(
    a: Sequence[float], b: Sequence[float], alternative: Alternative = "greater"
) -> MannWhitneyResult:
    """Run the exact one-sided Mann-Whitney U test of ``a`` against ``b``, ties included."""
    require(
        alternative in ("greater", "less"),
        f"alternative must be 'greater' or 'less', got {alternative!r}",
    )
    xs, ys = _sample("a", a), _sample("b", b)
    m, n = len(xs), len(ys)
    h_obs = sum(2 * (x > y) + (x == y) for x in xs for y in ys)  # 2U, an integer
    groups = tuple(len(list(g)) for _, g in itertools.groupby(sorted(xs + ys)))
    if len(groups) == m + n:
        counts, obs = _no_tie_counts(m, n), h_obs // 2
    else:
        counts, obs = _tied_counts(m, groups), h_obs
    tail = sum(counts[obs:]) if alternative == "greater" else sum(counts[: obs + 1])
    return MannWhitneyResult(h_obs / 2, tail / comb(m + n, m))


class RatioEstimate(NamedTuple):
    """The Hodges-Lehmann ratio with one-sided bounds (0 and inf when none is possible)."""

    estimate: float
    lower: float
    upper: float
    #: What each bound reaches, at least ``1 - alpha`` (1.0 when no bound is possible).
    confidence: float


@functools.lru_cache(maxsize=256)
def _critical_count(m: int, n: int, alpha: float) -> tuple[int, float]:
    """Return ``(c, confidence)``: the largest ``c`` with ``P0(U <= c - 1) <= alpha``."""
    total = comb(m + n, m)
    limit = Fraction(alpha) * total  # exact: no rounding drift at the threshold
    cum = c = 0
    for count in _no_tie_counts(m, n):
        if cum + count > limit:
            break
        cum += count
        c += 1
    return c, 1.0 - cum / total


def hodges_lehmann_ratio(
    a: Sequence[float], b: Sequence[float], *, alpha: float = 0.05
) -> RatioEstimate:
    """Estimate the ratio of ``a`` to ``b`` with exact distribution-free one-sided bounds.

    The median of the pairwise ratios (geometric mean of the middle two), bounded by their
    order statistics (Bauer 1972), dual to :func:`mann_whitney_u` for tie-free data.
    """
    require(0.0 < alpha < 0.5, f"alpha must be between 0 and 0.5, got {alpha!r}")
    xs, ys = _sample("a", a, positive=True), _sample("b", b, positive=True)
    m, n = len(xs), len(ys)
    ratios = sorted(x / y for x in xs for y in ys)
    mid = len(ratios) // 2
    estimate = ratios[mid] if len(ratios) % 2 else math.sqrt(ratios[mid - 1] * ratios[mid])
    c, confidence = _critical_count(m, n, alpha)
    if c == 0:
        return RatioEstimate(estimate, 0.0, math.inf, 1.0)
    return RatioEstimate(estimate, ratios[c - 1], ratios[m * n - c], confidence)


# -- Student's t and the binomial, through the regularized incomplete beta function ------------


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz's method)."""
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    h = d = 1.0 / (d if abs(d) > _TINY else _TINY)
    for i in range(1, 10_000):
        even = i * (b - i) * x / ((a - 1.0 + 2 * i) * (a + 2 * i))
        odd = -(a + i) * (a + b + i) * x / ((a + 2 * i) * (a + 1.0 + 2 * i))
        for num in (even, odd):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float, y: float) -> float:
    """Regularized ``I_x(a, b)``; ``y = 1 - x`` from the caller keeps precision near x = 1."""
    if x <= 0.0 or y <= 0.0:
        return 0.0 if x <= 0.0 else 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log(y)
    )
    if x < (a + 1.0) / (a + b + 2.0):  # where the fraction converges fast; symmetry otherwise
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, y) / b


def t_sf(t: float, df: float) -> float:
    """Return ``P(T > t)`` for Student's t with ``df`` degrees of freedom."""
    require(df > 0.0, f"degrees of freedom must be positive, got {df!r}")
    require(not math.isnan(t), "t_sf: t is NaN")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t), t * t / (df + t * t))
    return tail if t > 0 else 1.0 - tail


def _bisect(below: Callable[[float], bool], lo: float, hi: float) -> tuple[float, float]:
    """Narrow ``[lo, hi]`` around where ``below`` turns false, until no float lies between."""
    while lo < (mid := (lo + hi) / 2) < hi:
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    return lo, hi


@functools.lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Return the ``p``-quantile of Student's t: :func:`t_sf` bisected to the last bit."""
    require(0.0 < p < 1.0, f"probability must be between 0 and 1, got {p!r}")
    require(df > 0.0, f"degrees of freedom must be positive, got {df!r}")
    if p <= 0.5:
        return 0.0 if p == 0.5 else -t_ppf(1.0 - p, df)
    hi = 1.0
    while t_sf(hi, df) > 1.0 - p:
        hi *= 2.0
    return _bisect(lambda t: t_sf(t, df) > 1.0 - p, 0.0, hi)[1]


def binomial_bounds(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Return exact one-sided ``1 - alpha`` (Clopper-Pearson) bounds of a success fraction."""
    require(0 <= k <= n and n >= 1, f"need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    require(0 < alpha < 1, f"alpha must be in (0, 1), got {alpha!r}")

    def at_least(j: int, p: float) -> float:  # P(X >= j), X ~ Binomial(n, p)
        return 1.0 if j <= 0 else _betainc(j, n - j + 1, p, 1.0 - p)

    lower = _bisect(lambda p: at_least(k, p) <= alpha, 0.0, 1.0)[0] if k > 0 else 0.0
    upper = _bisect(lambda p: 1.0 - at_least(k + 1, p) > alpha, 0.0, 1.0)[1] if k < n else 1.0
    return lower, upper


def median_bounds(values: Sequence[float], alpha: float) -> tuple[float, float, float] | None:
    """Return one-sided order-statistic bounds of the median and their level, or None."""
    ordered, n = sorted(values), len(values)
    tails = [sum(comb(n, i) for i in range(k)) / 2**n for k in range(1, n + 1)]
    k = sum(1 for tail in tails if tail <= alpha)
    return None if k == 0 else (ordered[k - 1], ordered[n - k], 1 - tails[k - 1])


# -- sample-size planning on the log scale -------------------------------------------------------


def log_spread(a: Sequence[float], b: Sequence[float]) -> float:
    """Return the pooled standard deviation of ``log a`` and ``log b`` (about the run CV)."""
    logs = [[math.log(x) for x in _sample(s, v, positive=True)] for s, v in (("a", a), ("b", b))]
    df = len(logs[0]) + len(logs[1]) - 2
    require(df >= 1, "a pooled spread needs at least three values in all")
    ss = sum((v - statistics.fmean(side)) ** 2 for side in logs for v in side)
    return math.sqrt(ss / df)


def _check_plan(sigma: float, alpha: float, power: float) -> None:
    require(sigma >= 0.0 and math.isfinite(sigma), f"sigma must be finite and >= 0: {sigma!r}")
    require(0.0 < alpha < 0.5, f"alpha must be between 0 and 0.5, got {alpha!r}")
    require(0.5 <= power < 1.0, f"power must be at least 0.5 and below 1, got {power!r}")


def _quantiles(df: int, alpha: float, power: float) -> float:
    return t_ppf(1.0 - alpha, df) + t_ppf(power, df)


def min_detectable_ratio(
    sigma: float, n_a: int, n_b: int, *, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Return the smallest relative effect these sizes detect with ``power`` (0.05: 5 %).

    ``exp((t_{1-alpha} + t_{power}) * sigma * sqrt(1/n_a + 1/n_b)) - 1`` at
    ``df = n_a + n_b - 2``: a guide for the rank test, not its exact power.
    """
    _check_plan(sigma, alpha, power)
    require(min(n_a, n_b) >= 1 and n_a + n_b >= 3, f"need 1 run per side, 3 in all: {n_a}, {n_b}")
    spread = sigma * math.sqrt(1.0 / n_a + 1.0 / n_b)
    return math.expm1(_quantiles(n_a + n_b - 2, alpha, power) * spread)


def runs_needed(
    sigma: float, effect: float, *, alpha: float = 0.05, power: float = 0.8, limit: int = 100_000
) -> int | None:
    """Return the runs per side (at least :func:`min_runs`) that detect a true ratio ``effect``.

    None for an effect of 1, or beyond ``limit`` runs.
    """
    _check_plan(sigma, alpha, power)
    require(effect > 0.0 and math.isfinite(effect), f"effect must be a positive ratio: {effect!r}")
    delta = abs(math.log(effect))
    if delta == 0.0:
        return None
    # The normal-theory n is a lower bound (t quantiles exceed z); search up from there.
    z = statistics.NormalDist().inv_cdf
    n_z = 2.0 * ((z(1.0 - alpha) + z(power)) * sigma / delta) ** 2
    first = max(min_runs(alpha), 2, math.ceil(min(n_z, limit + 1)))
    detected = (
        n
        for n in range(first, limit + 1)
        if _quantiles(2 * n - 2, alpha, power) * sigma * math.sqrt(2.0 / n) <= delta
    )
    return next(detected, None)
