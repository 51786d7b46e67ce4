"""Adaptive speculation: qualify an adaptive server, and recommend its bucket config.

SGLang's ``--speculative-adaptive`` picks the draft steps per batch size from
``--speculative-adaptive-config`` (``docs/speculation.md``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.measure.results import Sweep
from pytest_sglang.report.entries import group_warnings
from pytest_sglang.verdicts.assertions import (
    Verdict,
    _compare,
    _direction,
    _same_levels,
    conclude,
    confounders,
)
from pytest_sglang.verdicts.decision import Outcome

# pytest reads __tracebackhide__ from a frame's globals too: a failed or refused verdict's
# traceback shows the test's line, none of this module's frames.
__tracebackhide__ = True

__all__ = ["AdaptiveRecommendation", "assert_adaptive", "recommend_adaptive_config"]


def assert_adaptive(
    adaptive: Sweep,
    base: Sweep,
    fixed: Sweep,
    metric: str = "output_throughput",
    by: float = 1.0,
    alpha: float = 0.05,
) -> Verdict:
    """Assert that ``adaptive`` is, at every level, not significantly slower than the best.

    The reference at each level is the better median of ``base`` and ``fixed``; the level
    fails on :func:`~pytest_sglang.assert_faster`'s FAIL against ``by`` times it (``by=0.95``
    tolerates 5 %). Too few runs to ever decide, against either reference, are refused, so
    a pass is never vacuous.
    """
    larger = _direction(metric)
    levels = _same_levels(adaptive, base, fixed)
    rows, slower, levels_evidence, warnings = [], [], [], []
    for level, a, b, f in zip(levels, adaptive, base, fixed, strict=True):
        # Both references are compared, so either too small to ever decide is refused.
        vs_base, vs_fixed = (_compare(a, other, metric, by, alpha) for other in (b, f))
        mb, mf = vs_base.median_b, vs_fixed.median_b
        best, c = (b, vs_base) if (mb >= mf) == larger else (f, vs_fixed)
        warnings += confounders(a, b)
        note = {Outcome.PASS: "faster", Outcome.INCONCLUSIVE: "not slower"}.get(c.outcome)
        if note is None:
            slower.append(f"C={level} ({1 - c.ratio:.1%})")
            note = f"SLOWER by {1 - c.ratio:.1%} (at least {1 - c.upper_bound:.1%})"
        rows.append(
            f"{level:>6}  {mb:>10.4g}  {mf:>10.4g}  {c.median_a:>10.4g}  "
            f"{best.server:>12}  {c.ratio:>7.4f}  {c.lower_bound:>7.4f}  {c.upper_bound:>7.4f}"
            f"  {note}"
        )
        levels_evidence.append({"level": level, "reference": best.server, **c.as_dict()})
    header = (
        f"{metric}: median per level; ratio = {adaptive.server}/best (Hodges-Lehmann, "
        f"one-sided bounds at alpha {alpha:g}), failing below {by:g}\n"
        f"{'C':>6}  {base.server:>10.10}  {fixed.server:>10.10}  {adaptive.server:>10.10}  "
        f"{'best':>12}  {'ratio':>7}  {'lower':>7}  {'upper':>7}"
    )
    summary = (
        f"{'FAIL' if slower else 'PASS'}: {adaptive.server} is {'' if slower else 'not '}"
        f"significantly slower than the best of {base.server} and {fixed.server} at "
        + (", ".join(slower) if slower else f"any of C={list(levels)}")
    )
    servers = {"adaptive": adaptive.server, "base": base.server, "fixed": fixed.server}
    outcome, table = Outcome.FAIL if slower else Outcome.PASS, "\n".join([header, *rows])
    evidence = servers | {"levels": levels_evidence}
    warnings = group_warnings(warnings)
    return conclude(Verdict("assert_adaptive", outcome, metric, summary, table, evidence, warnings))


@dataclass(frozen=True)
class AdaptiveRecommendation:
    """A recommended ``--speculative-adaptive-config`` and the evidence per level.

    ``config`` is the JSON object to write (:meth:`json`); ``levels`` one dict per measured
    level: each step count's median, the chosen step count and the comparison behind it.
    """

    config: dict[str, dict[str, Any]]
    levels: list[dict[str, Any]] = field(default_factory=list)
    metric: str = "output_throughput"

    @property
    def num_steps(self) -> int:
        """The ``--speculative-num-steps`` to launch with: the most steps any bucket chose."""
        return int(max(max(entry["candidate_steps"]) for entry in self.config.values()))

    def json(self) -> str:
        """Return the config as JSON text, for ``--speculative-adaptive-config``."""
        return json.dumps(self.config, indent=2) + "\n"

    def table(self) -> str:
        """Return the evidence per level as text."""
        steps = sorted(self.levels[0]["medians"]) if self.levels else []
        lines = [
            f"{self.metric} median per level and draft steps (0 = baseline)",
            f"{'C':>6}  " + "  ".join(f"{f'steps {s}':>10}" for s in steps) + "  chosen  why",
        ]
        for row in self.levels:
            cells = "  ".join(f"{row['medians'][s]:>10.4g}" for s in steps)
            lines.append(f"{row['level']:>6}  {cells}  {row['steps']:>6}  {row['why']}")
        return "\n".join([*lines, "config: " + json.dumps(self.config)])


def recommend_adaptive_config(
    base: Sweep,
    fixed: Mapping[int, Sweep],
    metric: str = "output_throughput",
    alpha: float = 0.05,
) -> AdaptiveRecommendation:
    """Recommend ``--speculative-adaptive-config`` buckets from a baseline and fixed-step sweeps.

    ``fixed`` maps a step count to its sweep over ``base``'s levels. Each level takes the best
    step count when it significantly beats the baseline, else 0; consecutive equal choices
    merge into one bucket keyed by its first concurrency (the first is ``"1"``). Launch with
    ``--speculative-num-steps`` :attr:`AdaptiveRecommendation.num_steps` (``docs/speculation.md``).
    """
    if not fixed or any(steps < 1 for steps in fixed):
        raise ComparisonRefused("recommend_adaptive_config needs sweeps at step counts >= 1")
    larger = _direction(metric)
    levels = _same_levels(base, *fixed.values())
    rows: list[dict[str, Any]] = []
    config: dict[str, dict[str, Any]] = {}
    for index, level in enumerate(levels):
        point = base.points[index]
        # Every sweep is compared, so one too small to ever decide is refused, chosen or not.
        compared = {
            s: _compare(sw.points[index], point, metric, 1.0, alpha) for s, sw in fixed.items()
        }
        speculative = {s: compared[s].median_a for s in sorted(compared)}
        best = max(fixed, key=lambda s: speculative[s] if larger else -speculative[s])
        chosen = compared[best]
        medians = {0: chosen.median_b} | speculative
        ratio = f"{chosen.ratio:.3f}x baseline"
        steps = best if chosen.outcome is Outcome.PASS else 0
        why = (
            f"{ratio} (lower bound {chosen.lower_bound:.3f})"
            if steps
            else f"best speculation (steps {best}) {ratio}, not significantly faster "
            f"({chosen.outcome.name})"
        )
        row = {"level": level, "medians": medians, "steps": steps, "why": why}
        rows.append(row | {"comparison": chosen.as_dict()})
        if not rows[:-1] or rows[-2]["steps"] != steps:  # consecutive equal choices merge
            config["1" if not config else str(level)] = {"candidate_steps": [steps]}
    return AdaptiveRecommendation(config=config, levels=rows, metric=metric)
