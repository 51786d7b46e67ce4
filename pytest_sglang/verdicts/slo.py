"""SLO verdicts: does a server meet a service-level objective, and up to what load.

An objective "p99 TTFT <= 2 s" holds when at least 99 % of requests meet the limit; exact
(Clopper-Pearson) bounds of the pooled requests' fraction decide, each objective at
``alpha / m`` (``docs/statistics.md``, "SLO verdicts"). :func:`find_capacity` bisects over
load levels, adding runs at a level while :func:`judge_slo` cannot decide; its bracket holds
with probability ``1 - alpha`` ("Capacity search").
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.measure.slo import Attainment, Slo, attainment, goodput
from pytest_sglang.verdicts.assertions import Verdict, conclude, record_verdict
from pytest_sglang.verdicts.decision import Outcome, judge
from pytest_sglang.verdicts.stats import binomial_bounds, require

# pytest reads __tracebackhide__ from a frame's globals too: a failed or refused verdict's
# traceback shows the test's line, none of this module's frames.
__tracebackhide__ = True

__all__ = [
    "CapacityVerdict",
    "LevelDecision",
    "ObjectiveDecision",
    "assert_slo",
    "find_capacity",
    "judge_slo",
    "requests_to_pass",
]

Level = int | float


def requests_to_pass(percentile: float, alpha: float = 0.05) -> int:
    """Return the fewest requests with which a violation-free run can PASS ``percentile``."""
    return math.ceil(math.log(alpha) / math.log(percentile / 100.0))


@dataclass(frozen=True)
class ObjectiveDecision(Attainment):
    """One objective's count (its :class:`Attainment`), bounds and outcome."""

    lower: float
    upper: float
    alpha: float
    outcome: Outcome

    def row(self) -> str:
        """Return one line of the evidence table."""
        return (
            f"{self.objective.describe():<28} {self.met:>6}/{self.requests:<6} "
            f"{self.fraction:>8.2%} [{self.lower:.4f}, {self.upper:.4f}] {self.outcome.name}"
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
        decisions.append(
            ObjectiveDecision(a.objective, a.met, a.requests, lower, upper, each, outcome)
        )
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
            {**asdict(d), "objective": d.objective.describe(), "outcome": d.outcome.value}
            for d in decisions
        ],
    }
    return conclude(Verdict("assert_slo", outcome, slo.describe(), summary, table, evidence))


@dataclass(frozen=True)
class LevelDecision:
    """What the search found at one level: outcome, runs spent, per-objective evidence."""

    level: Level
    outcome: Outcome
    runs: int
    requests: int
    objectives: tuple[ObjectiveDecision, ...]

    def row(self) -> str:
        """Return one line of the evidence table."""
        worst = min(self.objectives, key=lambda d: d.lower - d.objective.fraction)
        return (
            f"{self.level:>8g} {self.runs:>4} {self.requests:>8} "
            f"{worst.fraction:>8.2%} [{worst.lower:.4f}, {worst.upper:.4f}] "
            f"{self.outcome.name}"
        )


@dataclass(frozen=True)
class CapacityVerdict:
    """The search's answer, the bracket from ``level`` to ``upper``, and the evidence."""

    slo: Slo
    label: str
    unit: str
    alpha: float
    decisions: dict[Level, LevelDecision]
    #: The highest level shown to meet the SLO (None: not even the lowest).
    level: Level | None
    #: The lowest level above ``level`` that missed the SLO or stayed undecided (None: none).
    upper: Level | None

    @property
    def decided(self) -> bool:
        """Whether the bracket's upper end was shown to miss (not merely undecided)."""
        return self.upper is None or self.decisions[self.upper].outcome is Outcome.FAIL

    @property
    def runs(self) -> int:
        """Runs spent in all."""
        return sum(d.runs for d in self.decisions.values())

    def statement(self) -> str:
        """Return the answer in words, with its confidence."""
        confidence = f"{1 - self.alpha:.0%}"
        if self.level is None:
            head = f"{self.label} meets {self.slo.describe()} at none of the levels"
        else:
            head = f"capacity of {self.label} at {self.slo.describe()}: {self.unit}={self.level:g}"
        if self.upper is None:
            tail = " (the highest level searched)"  # it passed: no level above is left
        elif self.decided:
            tail = f"; {self.unit}={self.upper:g} misses it (bracket holds at >= {confidence})"
        else:
            tail = (
                f"; {self.unit}={self.upper:g} stayed undecided after "
                f"{self.decisions[self.upper].runs} runs: the capacity is at least "
                f"{self.level if self.level is not None else 'below the lowest level'}"
                f" (at >= {confidence}) and may reach {self.upper:g}"
            )
        return head + tail + f"; {self.runs} runs spent"

    def evidence(self) -> dict[str, Any]:
        """Return the answer and each probed level as plain JSON types."""
        return {
            "label": self.label,
            "slo": self.slo.describe(),
            "capacity": self.level,
            "upper": self.upper,
            "decided": self.decided,
            "runs": self.runs,
            "levels": [
                {
                    "level": d.level,
                    "outcome": d.outcome.value,
                    "runs": d.runs,
                    "requests": d.requests,
                }
                for d in sorted(self.decisions.values(), key=lambda d: d.level)
            ],
        }

    def table(self) -> str:
        """Return the evidence: one line per probed level, in load order."""
        header = f"{self.unit:>8} {'runs':>4} {'requests':>8} {'worst':>8} bounds"
        rows = [self.decisions[lv].row() for lv in sorted(self.decisions)]
        return "\n".join([self.statement(), header, *rows])


def find_capacity(
    run: Callable[[Level, int], Measurement],
    levels: Sequence[Level],
    slo: Slo | str,
    *,
    alpha: float = 0.05,
    max_runs: int = 5,
    label: str = "server",
    unit: str = "C",
) -> CapacityVerdict:
    """Find the highest of ``levels`` at which ``slo`` holds (see the module docstring).

    ``run(level, repeat)`` measures one run (its :class:`Measurement`, with records) at a
    level; at most ``max_runs`` are spent at one level; ``unit`` names the level in messages
    (``C`` or ``rate``).
    """
    slo = Slo.parse(slo) if isinstance(slo, str) else slo
    grid = tuple(sorted(set(levels)))
    require(bool(grid), "find_capacity needs at least one level")
    require(max_runs >= 1, f"max_runs must be at least 1, got {max_runs}")
    decisions: dict[Level, LevelDecision] = {}
    low, high = -1, len(grid)  # grid[low] shown to pass, grid[high] not passing
    while high - low > 1:
        mid = (low + high) // 2
        records: list[RequestRecord] = []
        for repeat in range(max_runs):  # more runs while the level stays undecided
            records += run(grid[mid], repeat).records
            # Each end of the bracket at alpha / 2.
            outcome, objectives = judge_slo(slo, records, alpha / 2, f"the run at {grid[mid]:g}")
            if outcome is not Outcome.INCONCLUSIVE:
                break
        decision = LevelDecision(grid[mid], outcome, repeat + 1, len(records), tuple(objectives))
        decisions[grid[mid]] = decision
        low, high = (mid, high) if outcome is Outcome.PASS else (low, mid)
    level = grid[low] if low >= 0 else None  # the highest level that passed
    upper = grid[high] if high < len(grid) else None  # the lowest that did not
    verdict = CapacityVerdict(slo, label, unit, alpha, decisions, level, upper)
    summary, table = verdict.statement(), verdict.table()
    record_verdict(
        Verdict("find_capacity", "finding", slo.describe(), summary, table, verdict.evidence())
    )
    return verdict
