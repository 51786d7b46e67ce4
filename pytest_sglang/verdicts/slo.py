"""``assert_slo``: does a server meet a service-level objective, with what confidence.

An objective "p99 TTFT <= 2 s" holds when at least 99 % of requests meet the limit; exact
(Clopper-Pearson) bounds of the pooled requests' fraction decide, each objective at
``alpha / m`` (``docs/statistics.md``, "SLO verdicts").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.measure.slo import Attainment, Slo, attainment, goodput
from pytest_sglang.verdicts.assertions import Verdict, conclude
from pytest_sglang.verdicts.decision import Outcome, judge
from pytest_sglang.verdicts.stats import binomial_bounds

# pytest reads __tracebackhide__ from a frame's globals too: a failed or refused verdict's
# traceback shows the test's line, none of this module's frames.
__tracebackhide__ = True

__all__ = ["ObjectiveDecision", "assert_slo", "judge_slo", "requests_to_pass"]


def requests_to_pass(percentile: float, alpha: float = 0.05) -> int:
    """Return the fewest requests with which a violation-free run can PASS ``percentile``."""
    fraction = percentile / 100.0
    return math.ceil(math.log(alpha) / math.log(fraction))


@dataclass(frozen=True)
class ObjectiveDecision:
    """One objective's count, bounds and outcome."""

    attainment: Attainment
    lower: float
    upper: float
    alpha: float
    outcome: Outcome

    def row(self) -> str:
        """Return one line of the evidence table."""
        a = self.attainment
        return (
            f"{a.objective.describe():<28} {a.met:>6}/{a.requests:<6} {a.fraction:>8.2%} "
            f"[{self.lower:.4f}, {self.upper:.4f}] {self.outcome.name}"
        )


def judge_slo(
    slo: Slo, records: Sequence[RequestRecord], alpha: float = 0.05, source: str = "the run"
) -> tuple[Outcome, list[ObjectiveDecision]]:
    """Judge ``slo`` on ``records`` (see the module docstring); pure.

    :raises ComparisonRefused: no records (``source``, e.g. a result's label, kept none).
    """
    if not records:
        raise ComparisonRefused(f"{source} kept no per-request records, which an SLO is judged on")
    each = alpha / len(slo.objectives)
    decisions = []
    for a in attainment(slo, records):
        lower, upper = binomial_bounds(a.met, a.requests, each)
        outcome = judge(lower >= a.objective.fraction, upper < a.objective.fraction)
        decisions.append(ObjectiveDecision(a, lower, upper, each, outcome))
    outcomes = {d.outcome for d in decisions}
    return judge(outcomes == {Outcome.PASS}, Outcome.FAIL in outcomes), decisions


def assert_slo(result: BenchResult, slo: Slo | str, alpha: float = 0.05) -> Verdict:
    """Assert that ``result``'s server meets ``slo`` (an :class:`Slo` or its text form).

    Decided on exact binomial bounds; the table lists each objective's count, bounds and
    outcome, and each run's goodput.
    """
    slo = Slo.parse(slo) if isinstance(slo, str) else slo
    records = [r for run in result.runs for r in run.records]
    outcome, decisions = judge_slo(slo, records, alpha, result.label())
    goodputs = [goodput(slo, run.records, run.duration) for run in result.runs]
    lines = [
        f"SLO {slo.describe()} on {result.label()}: {len(records)} requests in "
        f"{len(result.runs)} runs; one-sided bounds at alpha {alpha:g} "
        f"(Bonferroni over {len(slo.objectives)})",
        f"{'objective':<28} {'met':>13} {'fraction':>8} bounds",
        *(d.row() for d in decisions),
        "goodput per run (req/s meeting every objective): "
        + ", ".join(f"{g:.3g}" for g in goodputs),
    ]
    if outcome is Outcome.INCONCLUSIVE:
        needed = max(requests_to_pass(o.percentile, alpha) for o in slo.objectives)
        lines.append(
            "outcome: INCONCLUSIVE - the bounds straddle a percentile; a violation-free pass "
            f"needs at least {needed} requests"
        )
    table = "\n".join(lines)
    summary = f"{outcome.name}: {result.label()} meets {slo.describe()}"
    evidence = {
        "result": result.label(),
        "slo": slo.describe(),
        "requests": len(records),
        "goodput": goodputs,
        "objectives": [
            {
                "objective": d.attainment.objective.describe(),
                "met": d.attainment.met,
                "requests": d.attainment.requests,
                "lower": d.lower,
                "upper": d.upper,
                "alpha": d.alpha,
                "outcome": d.outcome.value,
            }
            for d in decisions
        ],
    }
    return conclude(Verdict("assert_slo", outcome, slo.describe(), summary, table, evidence))
