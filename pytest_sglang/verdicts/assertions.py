"""Performance verdicts that survive noise: pass, fail, or say they cannot decide.

Each assertion compares whole runs (one value per run, warm-up excluded) with exact,
distribution-free statistics (:mod:`pytest_sglang.verdicts.decision`), refuses comparisons
that would mean nothing (different workloads, invalid runs), warns about configurations
that confound the result, and records its evidence for the report. A failure's message is a
small table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pytest_sglang.errors import ComparisonRefused, PerformanceAssertionError
from pytest_sglang.measure.breakdown import breakdown_summary, summary_line
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.measure.results import BenchResult, Sweep
from pytest_sglang.report.context import record
from pytest_sglang.report.entries import VerdictBody, VerdictKind, group_warnings
from pytest_sglang.server.handle import effective_max_running_requests
from pytest_sglang.verdicts.decision import Comparison, Crossover, Outcome, compare, crossover
from pytest_sglang.verdicts.policy import settle_inconclusive
from pytest_sglang.verdicts.specdecode import (
    CycleEstimate,
    break_even_accept_length,
    estimate_cycle_time,
)

__all__ = [
    "CrossoverVerdict",
    "Verdict",
    "assert_at_least",
    "assert_at_most",
    "assert_faster",
    "break_even_accept_length",
    "conclude",
    "confounders",
    "estimate_break_even",
    "find_crossover",
    "record_verdict",
]


@dataclass
class Verdict:
    """The outcome of one assertion and its evidence (plain JSON via :meth:`as_dict`)."""

    kind: VerdictKind
    #: A comparison's outcome, or ``"finding"``: a result reported, not judged (a crossover).
    outcome: Outcome | Literal["finding"]
    metric: str
    summary: str
    table: str
    evidence: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether the claim was shown."""
        return self.outcome is Outcome.PASS

    def message(self) -> str:
        """Return the failure text: summary, table, warnings."""
        lines = [self.summary, "", self.table]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def as_dict(self) -> VerdictBody:
        """Return plain JSON types, for reports."""
        return {
            "kind": self.kind,
            "metric": self.metric,
            "outcome": self.outcome if isinstance(self.outcome, str) else self.outcome.value,
            "summary": self.summary,
            "warnings": list(self.warnings),
            "evidence": self.evidence,
            "table": self.table,
        }


def record_verdict(verdict: Verdict) -> None:
    """Record ``verdict`` and its evidence on the running test, for the report."""
    record({"record": "verdict", **verdict.as_dict()})


def conclude(verdict: Verdict) -> Verdict:
    """Record ``verdict`` for the report; raise on FAIL, else return it.

    INCONCLUSIVE raises ``Inconclusive``, skips the test or warns, as
    ``--sglang-inconclusive`` says (``verdicts/policy.py``).
    """
    __tracebackhide__ = True
    record_verdict(verdict)
    if verdict.outcome is Outcome.FAIL:
        raise PerformanceAssertionError(verdict.message(), verdict)
    if verdict.outcome is Outcome.INCONCLUSIVE:
        settle_inconclusive(verdict)  # fail, skip or warn: --sglang-inconclusive
    return verdict


def _direction(metric: str) -> bool:
    __tracebackhide__ = True
    spec = metric_spec(metric)
    if spec.larger_is_better is None:
        raise ComparisonRefused(
            f"{metric!r} describes the load, it has no better direction; compare a "
            "throughput or latency metric such as output_throughput or ttft.p50"
        )
    return spec.larger_is_better


def _not_applicable(a: BenchResult, b: BenchResult) -> list[str]:
    """Say which side's configuration is unknown: a server declared OpenAI-compatible."""
    return [
        f"{side.server} is an OpenAI-compatible server: its configuration is unknown (no "
        "/server_info), so models, TP sizes, context lengths and request caps were not "
        f"compared; checks that did not apply to it: {', '.join(side.not_applicable)}"
        for side in (a, b)
        if side.not_applicable
    ]


def _not_applicable_evidence(a: BenchResult, b: BenchResult) -> dict[str, Any]:
    found = {side.server: sorted(side.not_applicable) for side in (a, b) if side.not_applicable}
    return {"not_applicable": found} if found else {}


def confounders(a: BenchResult, b: BenchResult) -> list[str]:
    """Return differences between the two servers' configurations that confound a result.

    A server declared OpenAI-compatible has no configuration to compare: the warning says so.
    """
    unknown = _not_applicable(a, b)
    if unknown:
        return unknown
    warnings = []
    ca, cb = a.config, b.config
    model_a = ca.get("served_model_name") or ca.get("model_path")
    model_b = cb.get("served_model_name") or cb.get("model_path")
    if model_a != model_b:
        warnings.append(f"different models: {a.server} serves {model_a!r}, {b.server} {model_b!r}")
    for key, what in (("tp_size", "tensor-parallel sizes"), ("context_length", "context lengths")):
        # null (a real server's "not given") says nothing about the effective value.
        if ca.get(key) is not None and cb.get(key) is not None and ca.get(key) != cb.get(key):
            warnings.append(
                f"different {what}: {a.server} {key}={ca.get(key)!r}, {b.server} {cb.get(key)!r}"
            )
    warnings += _cap_confounders(a, b)
    return warnings


# -- the request cap, from effective values -----------------------------------------------------


def _cap(result: BenchResult) -> tuple[int | None, str]:
    """Return the most requests ``result``'s server runs at once, and where that comes from.

    A real server reports ``max_running_requests`` as ``null`` unless it was given (or
    declared 48 by speculative decoding); the effective limit is
    ``internal_states[*].effective_max_running_requests_per_dp`` when the configuration
    carries it.
    """
    config = result.config
    effective = effective_max_running_requests(config)
    if effective is None:
        return None, "max_running_requests null: not set on its command line"
    if isinstance(config.get("internal_states"), list):
        return effective, "the scheduler's effective limit"
    return effective, "max_running_requests"


def _cap_confounders(a: BenchResult, b: BenchResult) -> list[str]:
    (cap_a, where_a), (cap_b, where_b) = _cap(a), _cap(b)
    level = max(a.concurrency, b.concurrency)
    if cap_a is not None and cap_b is not None:
        if cap_a == cap_b or level <= min(cap_a, cap_b):
            return []
        low, low_where = (a, where_a) if cap_a < cap_b else (b, where_b)
        return [
            f"C={level}: {low.server} runs at most {min(cap_a, cap_b)} requests "
            f"at once ({low_where}; EAGLE's implicit cap is 48) while the other runs up to "
            f"{max(cap_a, cap_b)}: the rest queue, so the comparison measures the cap as much "
            "as the configuration; pin --max-running-requests on both profiles"
        ]
    known = [
        (side, cap, where)
        for side, cap, where in ((a, cap_a, where_a), (b, cap_b, where_b))
        if cap is not None
    ]
    if len(known) != 1:
        return []
    capped, cap, where = known[0]
    other = b if capped is a else a
    if level <= cap:
        return []
    return [
        f"C={level}: {capped.server} runs at most {cap} requests at once ({where}; "
        f"EAGLE's implicit cap is 48) while {other.server}'s /server_info reports "
        "max_running_requests null (not set on its command line: SGLang sized its limit from "
        "the KV cache, and that effective value is not in this result's configuration): "
        "the rest queue, so the comparison measures the cap as much as the configuration; "
        "pin --max-running-requests on both profiles"
    ]


def _check_comparable(a: BenchResult, b: BenchResult, metric: str) -> None:
    __tracebackhide__ = True
    if a.workload.key() != b.workload.key():
        raise ComparisonRefused(
            f"cannot compare {a.label()} with {b.label()}: the workloads differ "
            f"({a.workload.as_dict()} vs {b.workload.as_dict()}); measure both with the same "
            "Workload"
        )
    if a.concurrency != b.concurrency:
        raise ComparisonRefused(
            f"cannot compare {a.label()} with {b.label()}: different concurrency levels"
        )
    for side in (a, b):
        if not side.valid:
            raise ComparisonRefused(
                f"cannot judge {side.label()}: its runs failed validity checks, so its "
                f"{metric} is not what the workload asked for:\n  " + "\n  ".join(side.problems())
            )


def _schedule_note(a: BenchResult, b: BenchResult) -> list[str]:
    if a.schedule == b.schedule == "interleaved":
        return []
    return [
        f"runs measured in blocks ({a.server} then {b.server}), not interleaved: drift "
        "between the blocks is not cancelled (launched servers share the GPUs)"
    ]


def _compare(a: BenchResult, b: BenchResult, metric: str, by: float, alpha: float) -> Comparison:
    __tracebackhide__ = True
    larger_is_better = _direction(metric)  # an unknown metric fails here, before any run
    try:
        return compare(
            a.values(metric),
            b.values(metric),
            larger_is_better=larger_is_better,
            by=by,
            alpha=alpha,
            label_a=a.server,
            label_b=b.server,
            metric=metric,
        )
    except ValueError as exc:
        raise ComparisonRefused(f"cannot compare {a.label()} with {b.label()}: {exc}") from None


def _context(a: BenchResult, b: BenchResult) -> str:
    workload = a.workload
    lines = [
        f"workload: {workload.endpoint}, input {workload.input_len} / output "
        f"{workload.output_len} tokens, {workload.for_concurrency(a.concurrency).requests} "
        f"requests per run, concurrency {a.concurrency}",
    ]
    for side in (a, b):
        config = ", ".join(f"{k}={v}" for k, v in side.config.items() if k != "version")
        if side.not_applicable:
            config = "OpenAI-compatible server (configuration unknown: no /server_info)"
        lines.append(f"{side.server}: {config}")
    lines += _breakdown_lines(a, b)
    return "\n".join(lines)


# -- where TTFT went, from the server's own timings ---------------------------------------------


def _breakdowns(*sides: BenchResult) -> dict[str, dict[str, Any]]:
    """Each side's TTFT split (queue, prefill, rest), when its server reported the timings."""
    found = {}
    for side in sides:
        summary = breakdown_summary(side.runs)
        if summary is not None:
            found[side.server] = summary
    return found


def _breakdown_evidence(*sides: BenchResult) -> dict[str, Any]:
    found = _breakdowns(*sides)
    return {"ttft_breakdown": found} if found else {}


def _breakdown_lines(*sides: BenchResult) -> list[str]:
    return [f"{server}: {summary_line(summary)}" for server, summary in _breakdowns(*sides).items()]


def assert_faster(
    a: BenchResult,
    b: BenchResult,
    metric: str = "output_throughput",
    by: float = 1.0,
    alpha: float = 0.05,
) -> Verdict:
    """Assert that ``a`` beats ``b`` on ``metric`` by at least the ratio ``by``, significantly.

    Direction-aware: for latency metrics (``ttft.p50``...) smaller is better and ``by=1.1``
    means 1.1x lower. Passes when an exact one-sided Mann-Whitney test on the runs is
    significant at ``alpha`` and the Hodges-Lehmann ratio's lower bound clears ``by``.

    :raises PerformanceAssertionError: the runs show ``a`` does not beat ``b`` by ``by``.
    :raises Inconclusive: the runs cannot decide; says the detectable effect and the runs
        that would decide.
    :raises ComparisonRefused: different workloads, invalid runs or too few runs.
    """
    __tracebackhide__ = True
    _check_comparable(a, b, metric)
    comparison = _compare(a, b, metric, by, alpha)
    verdict = Verdict(
        kind="assert_faster",
        outcome=comparison.outcome,
        metric=metric,
        summary=f"assert_faster({a.label()}, {b.label()}): {comparison.summary()}",
        table=comparison.table() + "\n" + _context(a, b),
        evidence={
            "a": a.label(),
            "b": b.label(),
            "workload": a.workload.as_dict(),
            "comparison": comparison.as_dict(),
            "schedule": "interleaved" if a.schedule == b.schedule == "interleaved" else "blocks",
            **_breakdown_evidence(a, b),
            **_not_applicable_evidence(a, b),
        },
        warnings=confounders(a, b) + _schedule_note(a, b),
    )
    return conclude(verdict)


def _median_bounds(values: Sequence[float], alpha: float) -> tuple[float, float, float]:
    """Return a distribution-free one-sided (lower, upper) bound of the median and its level.

    The lower bound is the k-th smallest run, with k the largest order whose binomial tail
    P(Binom(n, 1/2) <= k - 1) stays within ``alpha``; the upper bound mirrors it.
    """
    __tracebackhide__ = True
    ordered = sorted(values)
    n = len(ordered)
    k, tail = 0, 0.0
    for order in range(1, n + 1):
        tail_at = sum(math.comb(n, i) for i in range(order)) / 2**n
        if tail_at > alpha:
            break
        k, tail = order, tail_at
    if k == 0:
        need = next(m for m in range(1, 64) if 0.5**m <= alpha)
        raise ComparisonRefused(
            f"{n} runs cannot bound the median at alpha {alpha:g}; measure at least {need} runs"
        )
    return ordered[k - 1], ordered[n - k], 1 - tail


def _absolute(m: BenchResult, metric: str, value: float, alpha: float, at_least: bool) -> Verdict:
    __tracebackhide__ = True
    if not m.valid:
        raise ComparisonRefused(
            f"cannot judge {m.label()}: its runs failed validity checks:\n  "
            + "\n  ".join(m.problems())
        )
    metric_spec(metric)  # an unknown metric fails here (a hidden frame), not in BenchResult
    values = m.values(metric)
    lower, upper, confidence = _median_bounds(values, alpha)
    word = ">=" if at_least else "<="
    if at_least:
        outcome = Outcome.PASS if lower >= value else Outcome.FAIL if upper < value else None
    else:
        outcome = Outcome.PASS if upper <= value else Outcome.FAIL if lower > value else None
    outcome = outcome or Outcome.INCONCLUSIVE
    runs = ", ".join(format(v, ".6g") for v in values)
    table = (
        f"{metric} of {m.label()} per run: {runs}\n"
        f"median {format(m.median(metric), '.6g')}; one-sided {confidence:.1%} bounds of the "
        f"median: lower {lower:.6g}, upper {upper:.6g}; gate {word} {value:g}"
    )
    if outcome is Outcome.INCONCLUSIVE:
        table += (
            "\noutcome: INCONCLUSIVE - the threshold lies between the bounds; more runs "
            "(or less noise) would decide"
        )
    if metric.startswith("ttft"):
        table += "".join(f"\n{line}" for line in _breakdown_lines(m))
    return Verdict(
        kind="assert_at_least" if at_least else "assert_at_most",
        outcome=outcome,
        metric=metric,
        summary=f"{outcome.name}: {metric} of {m.label()} {word} {value:g}",
        table=table,
        evidence={
            "result": m.label(),
            "values": values,
            "threshold": value,
            "lower": lower,
            "upper": upper,
            "confidence": confidence,
            **_breakdown_evidence(m),
        },
    )


def assert_at_least(m: BenchResult, metric: str, value: float, alpha: float = 0.05) -> Verdict:
    """Assert an absolute floor, on the lower confidence bound of the median run.

    Passes when the bound is at least ``value``; fails when even the upper bound is below;
    inconclusive in between. E.g. ``assert_at_least(base, "output_throughput", 700)``.

    :raises PerformanceAssertionError: the upper bound is below ``value``.
    :raises ComparisonRefused: invalid runs, an unknown metric or too few runs.
    """
    __tracebackhide__ = True
    return conclude(_absolute(m, metric, value, alpha, at_least=True))


def assert_at_most(m: BenchResult, metric: str, value: float, alpha: float = 0.05) -> Verdict:
    """Assert an absolute ceiling, on the upper confidence bound of the median run.

    E.g. ``assert_at_most(spec, "ttft.p99", 0.5)`` for a TTFT p99 of at most 0.5 s.

    :raises PerformanceAssertionError: the lower bound is above ``value``.
    :raises ComparisonRefused: invalid runs, an unknown metric or too few runs.
    """
    __tracebackhide__ = True
    return conclude(_absolute(m, metric, value, alpha, at_least=False))


@dataclass(eq=False)
class CrossoverVerdict:
    """Where ``spec`` stops being significantly faster than ``base`` over a sweep.

    ``level`` is that concurrency, or None when ``spec`` wins at every level. Compares with
    numbers by its level (``find_crossover(spec, base) <= 10``); a sweep without a crossover
    compares as never below any bound. ``table()`` is the per-level evidence.
    """

    crossover: Crossover
    metric: str
    warnings: list[str] = field(default_factory=list)

    @property
    def level(self) -> int | None:
        """The crossover concurrency, or None."""
        return None if self.crossover.level is None else int(self.crossover.level)

    def table(self) -> str:
        """Return the per-level evidence as text."""
        return "\n".join([self.crossover.table(), *(f"warning: {w}" for w in self.warnings)])

    def __repr__(self) -> str:
        return f"<crossover at {self.level}>\n{self.table()}"

    def _position(self) -> float:
        return math.inf if self.level is None else float(self.level)

    def __eq__(self, other: object) -> bool:
        if other is None:
            return self.level is None
        if not isinstance(other, (int, float)):
            return NotImplemented
        return self._position() == other

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]

    def __le__(self, other: object) -> bool:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return self._position() <= other

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return self._position() < other

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return self._position() >= other

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, (int, float)):
            return NotImplemented
        return self._position() > other


def find_crossover(
    spec: Sweep,
    base: Sweep,
    metric: str = "output_throughput",
    by: float = 1.0,
    alpha: float = 0.05,
) -> CrossoverVerdict:
    """Find the lowest concurrency at which ``spec`` is no longer significantly faster.

    Each level is an :func:`assert_faster`-style comparison (no exception per level); the
    result carries the per-level evidence, and the report prints it.

    :raises ComparisonRefused: the sweeps' levels or workloads differ, or a level is invalid.
    """
    __tracebackhide__ = True
    if spec.levels != base.levels:
        raise ComparisonRefused(
            f"the sweeps cover different levels: {spec.server} {spec.levels}, "
            f"{base.server} {base.levels}; sweep both over the same list"
        )
    comparisons, warnings = [], []
    for a, b in zip(spec.points, base.points, strict=True):
        _check_comparable(a, b, metric)
        comparisons.append(_compare(a, b, metric, by, alpha))
        warnings += confounders(a, b)
    warnings = group_warnings(warnings)
    result = CrossoverVerdict(crossover(spec.levels, comparisons), metric, warnings)
    record_verdict(
        Verdict(
            kind="find_crossover",
            outcome="finding",
            metric=metric,
            summary=f"crossover of {spec.server} vs {base.server}: "
            + ("none" if result.level is None else f"C={result.level}"),
            table=result.crossover.table(),
            evidence={
                "spec": spec.server,
                "base": base.server,
                "crossover": result.crossover.as_dict(),
            },
            warnings=warnings,
        )
    )
    return result


def estimate_break_even(spec: BenchResult, base: BenchResult) -> CycleEstimate:
    """Estimate the speculative cycle and the break-even acceptance length from two results.

    Uses the median over runs of each side's mean TPOT and ``spec``'s acceptance length
    (``sum(completion_tokens) / sum(spec_verify_ct)``), at the same workload and concurrency.

    :raises ComparisonRefused: not comparable, or ``spec`` reports no acceptance length.
    """
    __tracebackhide__ = True
    _check_comparable(spec, base, "tpot")
    accept = spec.median("acceptance_length")
    spec_tpot, base_tpot = spec.median("tpot"), base.median("tpot")
    if accept is None or spec_tpot is None or base_tpot is None:
        raise ComparisonRefused(
            f"{spec.label()} reports no acceptance length or TPOT: is speculative decoding on "
            "and the workload streamed?"
        )
    return estimate_cycle_time(spec_tpot=spec_tpot, base_tpot=base_tpot, accept_length=accept)
