"""The pure decision core of the verdicts: whether configuration *a* beats *b*, from whole runs.

Input is one number per run; output is PASS, FAIL or INCONCLUSIVE with the evidence. Nothing
here measures, prints or asserts (:mod:`pytest_sglang.verdicts.assertions` does). The rule
is in ``docs/statistics.md``, "Decision rule".
"""

from __future__ import annotations

import enum
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_sglang.verdicts.planning import log_spread, min_detectable_ratio, runs_needed
from pytest_sglang.verdicts.ranks import hodges_lehmann_ratio, mann_whitney_u, min_p_value, min_runs

__all__ = ["Comparison", "Crossover", "Outcome", "compare", "crossover"]


class Outcome(enum.Enum):
    """The three verdicts of a comparison."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


def _fmt(value: float) -> str:
    return format(value, ".6g")


def _pct(fraction: float) -> str:
    return f"{100.0 * fraction:.1f}%"


def _cv(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) / mean


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare` and all the evidence behind it.

    Ratios, bounds and ``by`` are goodness ratios: above 1 means *a* is better (``a / b``
    when larger is better, ``b / a`` when smaller is better).
    """

    #: PASS, FAIL or INCONCLUSIVE (``docs/statistics.md``, "Decision rule").
    outcome: Outcome
    #: The runs of *a* and *b*, one value per run, in the order given.
    a: tuple[float, ...]
    b: tuple[float, ...]
    #: The metric's direction.
    larger_is_better: bool
    #: The goodness ratio *a* had to beat.
    by: float
    #: The one-sided significance level of each test.
    alpha: float
    #: The power that :attr:`mde` and :attr:`repeats_needed` are computed for.
    power: float
    #: Medians of the raw values.
    median_a: float
    median_b: float
    #: Hodges-Lehmann estimate of the goodness ratio (median of the pairwise ratios).
    ratio: float
    #: One-sided lower and upper bounds on the goodness ratio, each at :attr:`confidence`.
    lower_bound: float
    upper_bound: float
    #: The confidence each one-sided bound achieves (at least ``1 - alpha``).
    confidence: float
    #: Exact one-sided p-value for "goodness ratio > by" (PASS needs ``<= alpha``).
    p_value: float
    #: Exact one-sided p-value for "goodness ratio < by" (FAIL needs ``<= alpha``).
    p_value_fail: float
    #: Pooled standard deviation of the log values: about the run-to-run CV.
    sigma: float
    #: Coefficients of variation of each side (None with a single run).
    cv_a: float | None
    cv_b: float | None
    #: Smallest detectable effect with these sample sizes, as a fraction of the target:
    #: a true goodness ratio of ``by * (1 + mde)`` or more passes, and ``by / (1 + mde)`` or
    #: less fails, with probability :attr:`power` (two-sample t approximation on the logs).
    mde: float
    #: When inconclusive: runs per side (from scratch) that would decide a true ratio equal
    #: to :attr:`ratio` with probability :attr:`power`; None otherwise, or when the observed
    #: ratio sits on the target so that no practical number of runs would decide.
    repeats_needed: int | None
    #: Names used in the table and messages.
    label_a: str = "a"
    label_b: str = "b"
    metric: str = "value"

    @property
    def n_a(self) -> int:
        """Number of runs of *a*."""
        return len(self.a)

    @property
    def n_b(self) -> int:
        """Number of runs of *b*."""
        return len(self.b)

    @property
    def ratio_label(self) -> str:
        """How the goodness ratio is formed, e.g. ``eagle3/baseline``."""
        if self.larger_is_better:
            return f"{self.label_a}/{self.label_b}"
        return f"{self.label_b}/{self.label_a}"

    def summary(self) -> str:
        """Return a one-line statement of the outcome and its evidence.

        :returns: e.g. ``PASS: eagle3/baseline = 1.038 >= 1 (95.2% lower bound 1.021), p = 0.004``.
        """
        conf = _pct(self.confidence)
        ratio = f"{self.ratio_label} = {self.ratio:.4g}"
        if self.outcome is Outcome.PASS:
            return (
                f"PASS: {ratio} > {self.by:g} ({conf} lower bound {self.lower_bound:.4g}), "
                f"p = {self.p_value:.3g}"
            )
        if self.outcome is Outcome.FAIL:
            return (
                f"FAIL: {ratio} < {self.by:g} ({conf} upper bound {self.upper_bound:.4g}), "
                f"p = {self.p_value_fail:.3g}"
            )
        need = (
            f"; about {self.repeats_needed} runs per side would decide"
            if self.repeats_needed is not None
            else ""
        )
        return (
            f"INCONCLUSIVE: {ratio} vs target {self.by:g}, {conf} bounds "
            f"[{self.lower_bound:.4g}, {self.upper_bound:.4g}] with {self.n_a}+{self.n_b} runs; "
            f"smallest detectable effect {_pct(self.mde)}{need}"
        )

    def table(self) -> str:
        """Render the runs and the statistics as plain text, for failure messages.

        :returns: a multi-line table: each run's value, the medians, the ratio with its
            bounds, both p-values, the spread and the outcome.
        """
        la, lb = self.label_a, self.label_b
        direction = "larger" if self.larger_is_better else "smaller"
        rows = max(self.n_a, self.n_b)
        width = max(12, len(la), len(lb))
        lines = [
            f"{self.metric} ({direction} is better): {la} vs {lb}, "
            f"target {self.ratio_label} > {self.by:g} at alpha {self.alpha:g}",
            f"{'run':>6}  {la:>{width}}  {lb:>{width}}",
        ]
        for i in range(rows):
            va = _fmt(self.a[i]) if i < self.n_a else ""
            vb = _fmt(self.b[i]) if i < self.n_b else ""
            lines.append(f"{i + 1:>6}  {va:>{width}}  {vb:>{width}}")
        lines.append(
            f"{'median':>6}  {_fmt(self.median_a):>{width}}  {_fmt(self.median_b):>{width}}"
        )
        cv_a = "-" if self.cv_a is None else _pct(self.cv_a)
        cv_b = "-" if self.cv_b is None else _pct(self.cv_b)
        lines.append(f"{'cv':>6}  {cv_a:>{width}}  {cv_b:>{width}}")
        conf = _pct(self.confidence)
        lines += [
            f"ratio {self.ratio_label} (Hodges-Lehmann) {self.ratio:.4f}; one-sided {conf} "
            f"bounds: lower {self.lower_bound:.4f}, upper {self.upper_bound:.4f}",
            f"exact Mann-Whitney p ({self.ratio_label} > {self.by:g}) = {self.p_value:.4g}, "
            f"p ({self.ratio_label} < {self.by:g}) = {self.p_value_fail:.4g}",
            f"smallest detectable effect with {self.n_a}+{self.n_b} runs: {_pct(self.mde)} "
            f"({_pct(self.power)} power, log spread {self.sigma:.4f})",
        ]
        if self.outcome is Outcome.INCONCLUSIVE:
            if self.repeats_needed is None:
                advice = "the observed ratio is at the target: more runs will not settle it"
            else:
                advice = (
                    f"about {self.repeats_needed} runs per side would decide a true ratio of "
                    f"{self.ratio:.4g} with {_pct(self.power)} power; measure them afresh "
                    "(adding runs to these and testing again inflates the false-pass rate)"
                )
            lines.append(f"outcome: INCONCLUSIVE - {advice}")
        else:
            lines.append(f"outcome: {self.outcome.name}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Return the comparison as plain JSON types (no NaN or infinities)."""
        return {
            "outcome": self.outcome.value,
            "metric": self.metric,
            "label_a": self.label_a,
            "label_b": self.label_b,
            "larger_is_better": self.larger_is_better,
            "by": self.by,
            "alpha": self.alpha,
            "power": self.power,
            "n_a": self.n_a,
            "n_b": self.n_b,
            "a": list(self.a),
            "b": list(self.b),
            "median_a": self.median_a,
            "median_b": self.median_b,
            "ratio": self.ratio,
            "lower_bound": self.lower_bound,
            "upper_bound": self.upper_bound,
            "confidence": self.confidence,
            "p_value": self.p_value,
            "p_value_fail": self.p_value_fail,
            "sigma": self.sigma,
            "cv_a": self.cv_a,
            "cv_b": self.cv_b,
            "mde": self.mde,
            "repeats_needed": self.repeats_needed,
        }


def _runs(name: str, values: Sequence[float]) -> tuple[float, ...]:
    out = tuple(float(v) for v in values)
    for v in out:
        if not (v > 0.0 and math.isfinite(v)):
            raise ValueError(
                f"{name}: every run must be a positive finite number (ratios are taken), got {v!r}"
            )
    return out


def compare(
    a: Sequence[float],
    b: Sequence[float],
    *,
    larger_is_better: bool,
    by: float = 1.0,
    alpha: float = 0.05,
    power: float = 0.8,
    label_a: str = "a",
    label_b: str = "b",
    metric: str = "value",
) -> Comparison:
    """Decide whether *a* beats *b* by at least the ratio *by*, from one value per run.

    "Beats by *by*" means the goodness ratio, ``a / b`` if *larger_is_better* else ``b / a``,
    exceeds *by*. PASS and FAIL each need the exact Mann-Whitney test at *alpha* and the
    matching Hodges-Lehmann bound to agree (``docs/statistics.md``).

    :param a: the candidate's runs (positive values, e.g. tokens/s or seconds).
    :param b: the reference's runs.
    :param larger_is_better: the metric's direction (True for throughput, False for latency).
    :param by: the goodness ratio to beat: 1.0 for "better at all", 1.05 for "at least 5%
        better", 0.95 for "not more than about 5% worse".
    :param alpha: the one-sided significance level of each verdict, in (0, 0.5).
    :param power: the power used for :attr:`Comparison.mde` and
        :attr:`Comparison.repeats_needed`, in [0.5, 1).
    :param label_a: name of *a* in the table (e.g. the profile).
    :param label_b: name of *b* in the table.
    :param metric: name of the metric in the table.
    :raises ValueError: on non-positive or non-finite runs, a bad *by*, *alpha* or *power*, or
        sample sizes too small to ever reach *alpha* (the message names the minimum).
    """
    xs = _runs(label_a, a)
    ys = _runs(label_b, b)
    if not (by > 0.0 and math.isfinite(by)):
        raise ValueError(f"by must be a positive finite ratio, got {by!r}")
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be between 0 and 0.5, got {alpha!r}")
    if not 0.5 <= power < 1.0:
        raise ValueError(f"power must be at least 0.5 and below 1, got {power!r}")
    n_a, n_b = len(xs), len(ys)
    if n_a == 0 or n_b == 0:
        raise ValueError(
            f"{label_a} has {n_a} runs and {label_b} {n_b}: need at least "
            f"{min_runs(alpha)} runs per side at alpha {alpha:g}"
        )
    floor = min_p_value(n_a, n_b)
    if floor > alpha:
        raise ValueError(
            f"{label_a} has {n_a} runs and {label_b} {n_b}: the exact one-sided test can never "
            f"reach p <= {alpha:g} with so few (the smallest possible p is {floor:.3g}); "
            f"use at least {min_runs(alpha)} runs per side "
            f"(or {min_runs(alpha, other=n_b)} of {label_a} against these {n_b})"
        )

    # Orient everything as "goodness": the better side is the numerator, and the test asks
    # whether the numerator's runs exceed the denominator's scaled by the target.
    num, den = (xs, ys) if larger_is_better else (ys, xs)
    scaled = [by * v for v in den]
    p_pass = mann_whitney_u(num, scaled, "greater").p
    p_fail = mann_whitney_u(num, scaled, "less").p
    hl = hodges_lehmann_ratio(num, den, alpha=alpha)

    if p_pass <= alpha and hl.lower > by:
        outcome = Outcome.PASS
    elif p_fail <= alpha and hl.upper < by:
        outcome = Outcome.FAIL
    else:
        outcome = Outcome.INCONCLUSIVE

    sigma = log_spread(xs, ys)
    mde = min_detectable_ratio(sigma, n_a, n_b, alpha=alpha, power=power)
    needed = (
        runs_needed(sigma, hl.estimate / by, alpha=alpha, power=power)
        if outcome is Outcome.INCONCLUSIVE
        else None
    )
    return Comparison(
        outcome=outcome,
        a=xs,
        b=ys,
        larger_is_better=larger_is_better,
        by=by,
        alpha=alpha,
        power=power,
        median_a=statistics.median(xs),
        median_b=statistics.median(ys),
        ratio=hl.estimate,
        lower_bound=hl.lower,
        upper_bound=hl.upper,
        confidence=hl.confidence,
        p_value=p_pass,
        p_value_fail=p_fail,
        sigma=sigma,
        cv_a=_cv(xs),
        cv_b=_cv(ys),
        mde=mde,
        repeats_needed=needed,
        label_a=label_a,
        label_b=label_b,
        metric=metric,
    )


# --------------------------------------------------------------------------------------------
# Crossover over a concurrency sweep


@dataclass(frozen=True)
class Crossover:
    """Where, in an ascending sweep, *a* stops being significantly better than *b*."""

    #: The sweep's levels (e.g. concurrencies), ascending.
    levels: tuple[float, ...]
    #: One comparison per level, same order.
    comparisons: tuple[Comparison, ...]
    #: The lowest level whose outcome is not PASS, or None if every level passed.
    level: float | None
    #: Index of :attr:`level` in :attr:`levels`, or None.
    index: int | None
    #: False when some level above the crossover passes again: the sweep is not a clean
    #: "wins, then stops winning" and the crossover deserves a look.
    monotone: bool

    def table(self) -> str:
        """Render the per-level evidence as plain text.

        :returns: one line per level: outcome, goodness ratio with bounds, p-values, runs.
        """
        if not self.comparisons:
            return "no levels"
        first = self.comparisons[0]
        lines = [
            f"{first.metric}: {first.ratio_label} per level, target > {first.by:g} "
            f"at alpha {first.alpha:g}",
            f"{'level':>8}  {'outcome':<12}  {'ratio':>8}  {'lower':>8}  {'upper':>8}  "
            f"{'p(>)':>8}  {'p(<)':>8}  runs",
        ]
        for i, (level, comp) in enumerate(zip(self.levels, self.comparisons, strict=True)):
            mark = "  <- crossover" if i == self.index else ""
            lines.append(
                f"{level:>8g}  {comp.outcome.name:<12}  {comp.ratio:>8.4f}  "
                f"{comp.lower_bound:>8.4f}  {comp.upper_bound:>8.4f}  {comp.p_value:>8.3g}  "
                f"{comp.p_value_fail:>8.3g}  {comp.n_a}+{comp.n_b}{mark}"
            )
        if self.level is None:
            lines.append("crossover: none (significantly better at every level)")
        else:
            lines.append(f"crossover: {self.level:g}")
        if not self.monotone:
            lines.append("warning: a level above the crossover passes again (not monotone)")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """Return the crossover as plain JSON types.

        :returns: the level, monotonicity and each level's comparison.
        """
        return {
            "level": self.level,
            "monotone": self.monotone,
            "levels": [
                {"level": level, **comp.as_dict()}
                for level, comp in zip(self.levels, self.comparisons, strict=True)
            ],
        }


def crossover(levels: Sequence[float], comparisons: Sequence[Comparison]) -> Crossover:
    """Find the lowest level at which *a* is no longer significantly better than *b*.

    "Significantly better" is a PASS of the level's :class:`Comparison` (typically made with
    ``by=1``). The crossover is the first level, in ascending order, whose outcome is FAIL or
    INCONCLUSIVE: from there on, the sweep no longer shows that speculation pays off.

    :param levels: the sweep's levels (e.g. concurrencies), strictly ascending.
    :param comparisons: one comparison per level, in the same order.
    :returns: a :class:`Crossover` with the level (None if every level passed) and evidence.
    :raises ValueError: if the lengths differ, *levels* is empty or not strictly ascending.
    """
    lv = tuple(levels)
    cs = tuple(comparisons)
    if len(lv) != len(cs):
        raise ValueError(f"{len(lv)} levels but {len(cs)} comparisons")
    if not lv:
        raise ValueError("crossover needs at least one level")
    if any(not lo < hi for lo, hi in itertools.pairwise(lv)):
        raise ValueError(f"levels must be strictly ascending, got {list(lv)}")
    index = next((i for i, c in enumerate(cs) if c.outcome is not Outcome.PASS), None)
    monotone = index is None or all(c.outcome is not Outcome.PASS for c in cs[index:])
    return Crossover(
        levels=lv,
        comparisons=cs,
        level=None if index is None else lv[index],
        index=index,
        monotone=monotone,
    )
