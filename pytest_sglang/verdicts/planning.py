"""Sample-size planning on the log scale: how many runs a comparison needs.

The two-sample t approximation on log-ratios (``docs/statistics.md``, "Planning"), with
Student's t from the incomplete beta function. Standard library only, pure.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence

from pytest_sglang.verdicts.ranks import min_runs, positive_sample

__all__ = ["log_spread", "min_detectable_ratio", "runs_needed", "t_ppf", "t_sf"]


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

    ``0.5 * I_{df / (df + t^2)}(df / 2, 1 / 2)`` for ``t > 0``, by symmetry otherwise.

    :param t: the point.
    :param df: degrees of freedom, positive.
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

    Newton's method on :func:`t_sf`, safeguarded by bisection, to full double precision.

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
    :raises ValueError: on non-positive values or fewer than three values in all.
    """
    logs_a = [math.log(x) for x in positive_sample("a", a)]
    logs_b = [math.log(x) for x in positive_sample("b", b)]
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
    (``docs/statistics.md``, "Planning"); a guide for the rank test, not its exact power.

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
    the normal-theory ``n = 2 (z_{1-alpha} + z_{power})^2 sigma^2 / delta^2`` refined with
    Student t.

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
