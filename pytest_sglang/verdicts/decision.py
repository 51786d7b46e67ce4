"""The pure decision core: bounds against a target become PASS, FAIL or INCONCLUSIVE.

:func:`judge` is the one rule every verdict uses; :func:`compare` applies it to whole runs of
two configurations (``docs/statistics.md``, "Decision rule"). Nothing here prints or raises
a verdict (:mod:`pytest_sglang.verdicts.assertions` does).
"""

from __future__ import annotations

import enum
import functools
import itertools
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pytest_sglang.verdicts.stats import (
    _sample,
    hodges_lehmann_ratio,
    log_spread,
    mann_whitney_u,
    min_detectable_ratio,
    min_p_value,
    min_runs,
    require,
    runs_needed,
)

__all__ = ["Comparison", "Crossover", "Outcome", "compare", "judge"]


class Outcome(enum.Enum):
    """The three verdicts of a comparison."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


def judge(shown: bool, refuted: bool) -> Outcome:
    """PASS when the evidence shows the claim, FAIL when it refutes it, else INCONCLUSIVE."""
    return Outcome.PASS if shown else Outcome.FAIL if refuted else Outcome.INCONCLUSIVE


def _cv(values: Sequence[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None


@dataclass(frozen=True)
class Comparison:
    """The outcome of :func:`compare` and its evidence.

    Ratios, bounds and ``by`` are goodness ratios, above 1 when *a* is better; ``p_value``
    tests "ratio > by" (PASS), ``p_value_fail`` "ratio < by" (FAIL); ``mde`` and
    ``repeats_needed`` say what these runs detect and what would decide.
    """

    outcome: Outcome
    a: tuple[float, ...]
    b: tuple[float, ...]
    larger_is_better: bool
    by: float
    alpha: float
    power: float
    median_a: float
    median_b: float
    ratio: float
    lower_bound: float
    upper_bound: float
    confidence: float
    p_value: float
    p_value_fail: float
    sigma: float
    cv_a: float | None
    cv_b: float | None
    mde: float
    repeats_needed: int | None
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
        a, b = self.label_a, self.label_b
        return f"{a}/{b}" if self.larger_is_better else f"{b}/{a}"

    def summary(self) -> str:
        """Return one line: the outcome and its evidence."""
        conf, ratio = f"{self.confidence:.1%}", f"{self.ratio_label} = {self.ratio:.4g}"
        if self.outcome is not Outcome.INCONCLUSIVE:
            failed = self.outcome is Outcome.FAIL
            sign, side = ("<", "upper") if failed else (">", "lower")
            bound = self.upper_bound if failed else self.lower_bound
            p = self.p_value_fail if failed else self.p_value
            return (
                f"{self.outcome.name}: {ratio} {sign} {self.by:g} ({conf} {side} bound "
                f"{bound:.4g}), p = {p:.3g}"
            )
        return (
            f"INCONCLUSIVE: {ratio} vs target {self.by:g}, {conf} bounds "
            f"[{self.lower_bound:.4g}, {self.upper_bound:.4g}] {self.undecided()}"
        )

    def undecided(self) -> str:
        """Return what an inconclusive comparison had, and the runs that would decide it."""
        need = self.repeats_needed
        more = f"; about {need} runs per side would decide" if need is not None else ""
        return f"with {self.n_a}+{self.n_b} runs; smallest detectable effect {self.mde:.1%}{more}"

    def table(self) -> str:
        """Return the runs and the statistics as plain text, for failure messages."""
        la, lb, w = self.label_a, self.label_b, max(12, len(self.label_a), len(self.label_b))
        direction = "larger" if self.larger_is_better else "smaller"
        lines = [
            f"{self.metric} ({direction} is better): {la} vs {lb}, "
            f"target {self.ratio_label} > {self.by:g} at alpha {self.alpha:g}",
            f"{'run':>6}  {la:>{w}}  {lb:>{w}}",
        ]
        for i, (va, vb) in enumerate(itertools.zip_longest(self.a, self.b), 1):
            cells = ["" if v is None else format(v, ".6g") for v in (va, vb)]
            lines.append(f"{i:>6}  {cells[0]:>{w}}  {cells[1]:>{w}}")
        cv_a, cv_b = ("-" if cv is None else f"{cv:.1%}" for cv in (self.cv_a, self.cv_b))
        conf = f"{self.confidence:.1%}"
        lines += [
            f"{'median':>6}  {self.median_a:>{w}.6g}  {self.median_b:>{w}.6g}",
            f"{'cv':>6}  {cv_a:>{w}}  {cv_b:>{w}}",
            f"ratio {self.ratio_label} (Hodges-Lehmann) {self.ratio:.4f}; one-sided {conf} "
            f"bounds: lower {self.lower_bound:.4f}, upper {self.upper_bound:.4f}",
            f"exact Mann-Whitney p ({self.ratio_label} > {self.by:g}) = {self.p_value:.4g}, "
            f"p ({self.ratio_label} < {self.by:g}) = {self.p_value_fail:.4g}",
            f"smallest detectable effect with {self.n_a}+{self.n_b} runs: {self.mde:.1%} "
            f"({self.power:.1%} power, log spread {self.sigma:.4f})",
        ]
        outcome = f"outcome: {self.outcome.name}"
        if self.outcome is Outcome.INCONCLUSIVE and self.repeats_needed is None:
            outcome += " - the observed ratio is at the target: more runs will not settle it"
        elif self.outcome is Outcome.INCONCLUSIVE:
            outcome += (
                f" - about {self.repeats_needed} runs per side would decide a true ratio of "
                f"{self.ratio:.4g} with {self.power:.1%} power; measure them afresh "
                "(adding runs to these and testing again inflates the false-pass rate)"
            )
        return "\n".join([*lines, outcome])

    def as_dict(self) -> dict[str, Any]:
        """Return the comparison as plain JSON types (no NaN or infinities)."""
        return asdict(self) | {
            "outcome": self.outcome.value,
            "a": list(self.a),
            "b": list(self.b),
            "n_a": self.n_a,
            "n_b": self.n_b,
        }


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
    """Decide whether *a* beats *b* by at least the goodness ratio *by*, one value per run.

    PASS and FAIL each need the exact one-sided Mann-Whitney test at *alpha* and the matching
    Hodges-Lehmann bound to agree; a sample too small to ever reach *alpha* is refused.
    """
    require(by > 0.0 and math.isfinite(by), f"by must be a positive finite ratio, got {by!r}")
    require(0.0 < alpha < 0.5, f"alpha must be between 0 and 0.5, got {alpha!r}")
    sizes = f"{label_a} has {len(a)} runs and {label_b} {len(b)}"
    require(bool(a) and bool(b), f"{sizes}: need at least {min_runs(alpha)} runs per side")
    floor = min_p_value(len(a), len(b))
    require(
        floor <= alpha,
        f"{sizes}: the exact one-sided test can never reach p <= {alpha:g} with so few (the "
        f"smallest possible p is {floor:.3g}); use at least {min_runs(alpha)} runs per side "
        f"(or {min_runs(alpha, other=len(b))} of {label_a} against these {len(b)})",
    )
    xs = tuple(_sample(label_a, a, positive=True))
    ys = tuple(_sample(label_b, b, positive=True))
    # Goodness: the better side is the numerator, tested against the target-scaled other.
    num, den = (xs, ys) if larger_is_better else (ys, xs)
    p_pass = mann_whitney_u(num, [by * v for v in den], "greater").p
    p_fail = mann_whitney_u(num, [by * v for v in den], "less").p
    hl = hodges_lehmann_ratio(num, den, alpha=alpha)
    outcome = judge(p_pass <= alpha and hl.lower > by, p_fail <= alpha and hl.upper < by)
    sigma = log_spread(xs, ys)
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
        mde=min_detectable_ratio(sigma, len(xs), len(ys), alpha=alpha, power=power),
        repeats_needed=runs_needed(sigma, hl.estimate / by, alpha=alpha, power=power)
        if outcome is Outcome.INCONCLUSIVE
        else None,
        label_a=label_a,
        label_b=label_b,
        metric=metric,
    )


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Crossover:
    """Where, in a sweep's ascending ``levels``, *a* stops being significantly better than *b*.

    :attr:`level` (at :attr:`index`) is the lowest level whose comparison is not a PASS, None
    when all are. It compares with numbers by that level (``find_crossover(spec, base) <= 10``;
    None as never).
    """

    levels: tuple[int, ...]
    comparisons: tuple[Comparison, ...]
    warnings: list[str] = field(default_factory=list)

    @property
    def index(self) -> int | None:
        """The position of the crossover in ``levels``, None when every level passed."""
        passed = [c.outcome is Outcome.PASS for c in self.comparisons]
        return None if all(passed) else passed.index(False)

    @property
    def level(self) -> int | None:
        """The crossover level, None when every level passed."""
        return None if self.index is None else self.levels[self.index]

    @property
    def monotone(self) -> bool:
        """Whether no level above the crossover passes again."""
        rest = [] if self.index is None else self.comparisons[self.index :]
        return all(c.outcome is not Outcome.PASS for c in rest)

    def __repr__(self) -> str:
        return f"<crossover at {self.level}>\n{self.table()}"

    def __eq__(self, other: object) -> bool:
        if other is None:
            return self.level is None
        if not isinstance(other, (int, float)):
            return NotImplemented
        return (math.inf if self.level is None else self.level) == other

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return (math.inf if self.level is None else self.level) < other

    def table(self) -> str:
        """Return the per-level evidence as plain text, one line per level."""
        first = self.comparisons[0]
        lines = [
            f"{first.metric}: {first.ratio_label} per level, target > {first.by:g} "
            f"at alpha {first.alpha:g}",
            f"{'level':>8}  {'outcome':<12}  {'ratio':>8}  {'lower':>8}  {'upper':>8}  "
            f"{'p(>)':>8}  {'p(<)':>8}  runs",
        ]
        for i, (level, c) in enumerate(zip(self.levels, self.comparisons, strict=True)):
            lines.append(
                f"{level:>8g}  {c.outcome.name:<12}  {c.ratio:>8.4f}  {c.lower_bound:>8.4f}  "
                f"{c.upper_bound:>8.4f}  {c.p_value:>8.3g}  {c.p_value_fail:>8.3g}  "
                f"{c.n_a}+{c.n_b}" + ("  <- crossover" if i == self.index else "")
            )
        none = "none (significantly better at every level)"
        lines.append(f"crossover: {none if self.level is None else format(self.level, 'g')}")
        if not self.monotone:
            lines.append("warning: a level above the crossover passes again (not monotone)")
        return "\n".join(lines + [f"warning: {w}" for w in self.warnings])

    def as_dict(self) -> dict[str, Any]:
        """Return the level, monotonicity and each level's comparison as plain JSON types."""
        pairs = zip(self.levels, self.comparisons, strict=True)
        return {
            "level": self.level,
            "monotone": self.monotone,
            "levels": [{"level": level, **comp.as_dict()} for level, comp in pairs],
        }
