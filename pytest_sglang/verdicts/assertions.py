"""Performance verdicts that survive noise: pass, fail, or say they cannot decide.

Every assertion builds a :class:`Verdict` from whole runs and goes through :func:`conclude`:
recorded for the report, then raised, skipped or warned as its outcome and
``--sglang-inconclusive`` say (``docs/ci.md``, "Inconclusive verdicts"). Adaptive speculation
is judged and its bucket config recommended here too, from the same comparisons.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import warnings as warnings_module
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal, cast

import pytest

from pytest_sglang.config.settings import SETTINGS_KEY
from pytest_sglang.errors import (
    ComparisonRefused,
    Inconclusive,
    PerformanceAssertionError,
    SGLangWarning,
)
from pytest_sglang.measure.breakdown import breakdown_summary, summary_line
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.measure.results import BenchResult, Sweep
from pytest_sglang.report.entries import (
    CURRENT_ITEM,
    VerdictBody,
    VerdictKind,
    group_warnings,
    record,
)
from pytest_sglang.server.handle import effective_max_running_requests
from pytest_sglang.verdicts.decision import (
    Comparison,
    Crossover,
    Outcome,
    compare,
    judge,
)
from pytest_sglang.verdicts.specdecode import CycleEstimate, estimate_cycle_time
from pytest_sglang.verdicts.stats import median_bounds

# pytest reads __tracebackhide__ from a frame's globals too: a failed or refused verdict's
# traceback shows the test's line, none of this module's frames.
__tracebackhide__ = True

#: Where the package's files are: a warning names the first caller outside them.
_PACKAGE = os.path.dirname(os.path.dirname(__file__)) + os.sep

__all__ = [
    "AdaptiveRecommendation",
    "CrossoverVerdict",
    "Verdict",
    "assert_adaptive",
    "assert_at_least",
    "assert_at_most",
    "assert_faster",
    "conclude",
    "confounders",
    "estimate_break_even",
    "find_crossover",
    "recommend_adaptive_config",
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
        return "\n".join([self.summary, "", self.table, *(f"warning: {w}" for w in self.warnings)])

    def as_dict(self) -> VerdictBody:
        """Return plain JSON types, for reports."""
        outcome = self.outcome if isinstance(self.outcome, str) else self.outcome.value
        return cast("VerdictBody", asdict(self) | {"outcome": outcome})


def record_verdict(verdict: Verdict) -> None:
    """Record ``verdict`` and its evidence on the running test, for the report."""
    record({"record": "verdict", **verdict.as_dict()})


def conclude(verdict: Verdict) -> Verdict:
    """Record ``verdict``; raise on FAIL, settle INCONCLUSIVE by the policy, else return it.

    The policy is the running test's ``--sglang-inconclusive``: fail (also outside a test),
    skip or warn.

    :raises PerformanceAssertionError: on FAIL.
    :raises Inconclusive: on INCONCLUSIVE under ``fail``.
    """
    record_verdict(verdict)
    if verdict.outcome is Outcome.FAIL:
        raise PerformanceAssertionError(verdict.message(), verdict)
    if verdict.outcome is not Outcome.INCONCLUSIVE:
        return verdict
    item = CURRENT_ITEM.get()
    settings = None if item is None else item.config.stash.get(SETTINGS_KEY, None)
    policy = "fail" if settings is None else settings.inconclusive.value
    if policy == "skip":
        pytest.skip(f"inconclusive (--sglang-inconclusive=skip): {verdict.summary}")
    if policy != "warn":  # fail, and anything unknown: an undecided verdict never passes
        raise Inconclusive(verdict.message(), verdict)
    # Attributed to the user's line that called the verdict: the first frame outside the package.
    level, frame = 1, sys._getframe()
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        level, frame = level + 1, frame.f_back
    text = f"inconclusive (--sglang-inconclusive=warn): {verdict.message()}"
    warnings_module.warn(SGLangWarning(text), stacklevel=level)
    return verdict


# -- what makes two results comparable, and what confounds them ---------------------------------


def _refuse_invalid(side: BenchResult, what: str = "") -> None:
    if not side.valid:
        raise ComparisonRefused(
            f"cannot judge {side.label()}: its runs failed validity checks{what}:\n  "
            + "\n  ".join(side.problems())
        )


def _check_comparable(a: BenchResult, b: BenchResult, metric: str) -> None:
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
        _refuse_invalid(side, f", so its {metric} is not what the workload asked for")


def _compare(
    a: BenchResult,
    b: BenchResult,
    metric: str,
    by: float,
    alpha: float,
    labels: tuple[str, str] | None = None,
    what: str = "",
) -> Comparison:
    """Compare comparable results on ``metric``; an impossible comparison is refused."""
    larger = metric_spec(metric).larger_is_better  # an unknown metric fails before any run
    if larger is None:
        raise ComparisonRefused(
            f"{metric!r} describes the load, it has no better direction; compare a "
            "throughput or latency metric such as output_throughput or ttft.p50"
        )
    _check_comparable(a, b, metric)
    label_a, label_b = labels or (a.server, b.server)
    try:
        return compare(
            a.values(metric),
            b.values(metric),
            larger_is_better=larger,
            by=by,
            alpha=alpha,
            label_a=label_a,
            label_b=label_b,
            metric=metric,
        )
    except ValueError as exc:
        what = what or f"{a.label()} with {b.label()}"
        raise ComparisonRefused(f"cannot compare {what}: {exc}") from None


def confounders(a: BenchResult, b: BenchResult) -> list[str]:
    """Return differences between the two servers' configurations that confound a result.

    A server declared OpenAI-compatible has no configuration to compare: the warning says so.
    """
    unknown = [
        f"{side.server} is an OpenAI-compatible server: its configuration is unknown (no "
        "/server_info), so models, TP sizes, context lengths and request caps were not "
        f"compared; checks that did not apply to it: {', '.join(side.not_applicable)}"
        for side in (a, b)
        if side.not_applicable
    ]
    if unknown:
        return unknown
    ca, cb = a.config, b.config
    model_a, model_b = (c.get("served_model_name") or c.get("model_path") for c in (ca, cb))
    found = []
    if model_a != model_b:
        found.append(f"different models: {a.server} serves {model_a!r}, {b.server} {model_b!r}")
    for key, what in (("tp_size", "tensor-parallel sizes"), ("context_length", "context lengths")):
        # null (a real server's "not given") says nothing about the effective value.
        if None not in (ca.get(key), cb.get(key)) and ca.get(key) != cb.get(key):
            found.append(
                f"different {what}: {a.server} {key}={ca.get(key)!r}, {b.server} {cb.get(key)!r}"
            )
    return found + _cap_confounders(a, b)


def _cap_confounders(a: BenchResult, b: BenchResult) -> list[str]:
    """Warn when the lower of the servers' request caps (the effective ones) is below the load."""
    level = max(a.concurrency, b.concurrency)
    caps = [(effective_max_running_requests(side.config), side) for side in (a, b)]
    # The lower cap first; an unknown one (None) after any number.
    (cap, low), (high_cap, high) = sorted(caps, key=lambda k: math.inf if k[0] is None else k[0])
    if cap is None or cap == high_cap or level <= cap:
        return []
    effective = isinstance(low.config.get("internal_states"), list)
    where = "the scheduler's effective limit" if effective else "max_running_requests"
    other = f"the other runs up to {high_cap}"
    if high_cap is None:
        other = (
            f"{high.server}'s /server_info reports max_running_requests null "
            "(not set on its command line: SGLang sized its limit from the KV cache, and that "
            "effective value is not in this result's configuration)"
        )
    return [
        f"C={level}: {low.server} runs at most {cap} requests at once ({where}; EAGLE's "
        f"implicit cap is 48) while {other}: the rest queue, so the comparison measures the "
        "cap as much as the configuration; pin --max-running-requests on both profiles"
    ]


def _same_levels(*sweeps: Sweep) -> tuple[int, ...]:
    """Return the levels that all ``sweeps`` cover, strictly ascending; any other is refused."""
    if len({sweep.levels for sweep in sweeps}) > 1:
        found = ", ".join(f"{sweep.server} {sweep.levels}" for sweep in sweeps)
        raise ComparisonRefused(
            f"the sweeps cover different levels: {found}; sweep all over the same list"
        )
    levels = sweeps[0].levels
    if not levels or any(lo >= hi for lo, hi in itertools.pairwise(levels)):
        what = "no level" if not levels else f"levels {levels} are not strictly ascending"
        raise ComparisonRefused(f"the sweeps have {what}: give one result per level, ascending")
    return levels


def _context(a: BenchResult, b: BenchResult) -> str:
    w = a.workload
    lines = [
        f"workload: {w.endpoint}, input {w.input_len} / output {w.output_len} tokens, "
        f"{w.for_concurrency(a.concurrency).requests} requests per run, concurrency "
        f"{a.concurrency}",
    ]
    for side in (a, b):
        config = ", ".join(f"{k}={v}" for k, v in side.config.items() if k != "version")
        if side.not_applicable:
            config = "OpenAI-compatible server (configuration unknown: no /server_info)"
        lines.append(f"{side.server}: {config}")
    return "\n".join(lines + _breakdown_lines(a, b))


def _breakdowns(*sides: BenchResult) -> dict[str, dict[str, Any]]:
    """Each side's TTFT split (queue, prefill, rest), when its server reported the timings."""
    return {s.server: found for s in sides if (found := breakdown_summary(s.runs)) is not None}


def _breakdown_lines(*sides: BenchResult) -> list[str]:
    return [f"{server}: {summary_line(summary)}" for server, summary in _breakdowns(*sides).items()]


def _extras(*sides: BenchResult) -> dict[str, Any]:
    """Return the evidence only some results have: TTFT splits, checks that did not apply."""
    skipped = {s.server: sorted(s.not_applicable) for s in sides if s.not_applicable}
    extras = {"ttft_breakdown": _breakdowns(*sides), "not_applicable": skipped}
    return {key: value for key, value in extras.items() if value}


# -- the assertions -----------------------------------------------------------------------------


def assert_faster(
    a: BenchResult,
    b: BenchResult,
    metric: str = "output_throughput",
    by: float = 1.0,
    alpha: float = 0.05,
) -> Verdict:
    """Assert that ``a`` beats ``b`` on ``metric`` by at least the ratio ``by``, significantly.

    Direction-aware (for ``ttft.p50``, ``by=1.1`` means 1.1x lower): the exact Mann-Whitney
    test at ``alpha`` and the Hodges-Lehmann bound must both clear ``by``.
    """
    comparison = _compare(a, b, metric, by, alpha)
    interleaved = a.schedule == b.schedule == "interleaved"
    blocks = [
        f"runs measured in blocks ({a.server} then {b.server}), not interleaved: drift "
        "between the blocks is not cancelled (launched servers share the GPUs)"
    ]
    summary = f"assert_faster({a.label()}, {b.label()}): {comparison.summary()}"
    evidence = {
        "a": a.label(),
        "b": b.label(),
        "workload": a.workload.as_dict(),
        "comparison": comparison.as_dict(),
        "schedule": "interleaved" if interleaved else "blocks",
        **_extras(a, b),
    }
    table = comparison.table() + "\n" + _context(a, b)
    warnings = confounders(a, b) + ([] if interleaved else blocks)
    return conclude(
        Verdict("assert_faster", comparison.outcome, metric, summary, table, evidence, warnings)
    )


def _absolute(
    kind: VerdictKind, m: BenchResult, metric: str, value: float, alpha: float
) -> Verdict:
    """Judge the median run of ``m`` against a floor (``assert_at_least``) or a ceiling."""
    _refuse_invalid(m)
    metric_spec(metric)  # an unknown metric fails here (a hidden frame), not in BenchResult
    values = m.values(metric)
    bounds = median_bounds(values, alpha)
    if bounds is None:
        need = next(k for k in range(1, 64) if 0.5**k <= alpha)
        raise ComparisonRefused(
            f"{len(values)} runs cannot bound the median at alpha {alpha:g}; measure at least "
            f"{need} runs"
        )
    lower, upper, confidence = bounds
    if kind == "assert_at_least":
        word, outcome = ">=", judge(lower >= value, upper < value)
    else:
        word, outcome = "<=", judge(upper <= value, lower > value)
    lines = [
        f"{metric} of {m.label()} per run: {', '.join(format(v, '.6g') for v in values)}",
        f"median {format(m.median(metric), '.6g')}; one-sided {confidence:.1%} bounds of the "
        f"median: lower {lower:.6g}, upper {upper:.6g}; gate {word} {value:g}",
    ]
    if outcome is Outcome.INCONCLUSIVE:
        lines.append(
            "outcome: INCONCLUSIVE - the threshold lies between the bounds; more runs "
            "(or less noise) would decide"
        )
    if metric.startswith("ttft"):
        lines += _breakdown_lines(m)
    summary = f"{outcome.name}: {metric} of {m.label()} {word} {value:g}"
    evidence = {
        "result": m.label(),
        "values": values,
        "threshold": value,
        "lower": lower,
        "upper": upper,
        "confidence": confidence,
        **_extras(m),
    }
    return conclude(Verdict(kind, outcome, metric, summary, "\n".join(lines), evidence))


def assert_at_least(m: BenchResult, metric: str, value: float, alpha: float = 0.05) -> Verdict:
    """Assert a floor on the median run, e.g. ``assert_at_least(base, "output_throughput", 700)``.

    Passes when the median's lower confidence bound is at least ``value``, fails when even
    the upper bound is below it, and is inconclusive in between.
    """
    return _absolute("assert_at_least", m, metric, value, alpha)


def assert_at_most(m: BenchResult, metric: str, value: float, alpha: float = 0.05) -> Verdict:
    """Assert an absolute ceiling on the median run: ``assert_at_most(spec, "ttft.p99", 0.5)``.

    Passes when the median's upper confidence bound is at most ``value``, fails when even the
    lower bound is above it, and is inconclusive in between.
    """
    return _absolute("assert_at_most", m, metric, value, alpha)


#: What :func:`find_crossover` returns (the name it had when it wrapped a ``Crossover``).
CrossoverVerdict = Crossover


def find_crossover(
    spec: Sweep,
    base: Sweep,
    metric: str = "output_throughput",
    by: float = 1.0,
    alpha: float = 0.05,
) -> Crossover:
    """Find the lowest concurrency at which ``spec`` is no longer significantly faster.

    Each level is an :func:`assert_faster`-style comparison that raises nothing; the result
    is recorded as a finding with the per-level evidence.
    """
    levels = _same_levels(spec, base)
    pairs = list(zip(spec, base, strict=True))
    comparisons = tuple(_compare(a, b, metric, by, alpha) for a, b in pairs)
    warnings = group_warnings([w for a, b in pairs for w in confounders(a, b)])
    result = Crossover(levels, comparisons, warnings)
    found = "none" if result.level is None else f"C={result.level}"
    summary = f"crossover of {spec.server} vs {base.server}: {found}"
    table = replace(result, warnings=[]).table()
    evidence = {"spec": spec.server, "base": base.server, "crossover": result.as_dict()}
    record_verdict(Verdict("find_crossover", "finding", metric, summary, table, evidence, warnings))
    return result


def estimate_break_even(spec: BenchResult, base: BenchResult) -> CycleEstimate:
    """Estimate the speculative cycle and break-even acceptance length from two results' medians.

    :raises ComparisonRefused: not comparable, or ``spec`` reports no acceptance length.
    """
    _check_comparable(spec, base, "tpot")
    accept = spec.median("acceptance_length")
    spec_tpot, base_tpot = spec.median("tpot"), base.median("tpot")
    if accept is None or spec_tpot is None or base_tpot is None:
        raise ComparisonRefused(
            f"{spec.label()} reports no acceptance length or TPOT: is speculative decoding on "
            "and the workload streamed?"
        )
    return estimate_cycle_time(spec_tpot=spec_tpot, base_tpot=base_tpot, accept_length=accept)


# -- adaptive speculation (docs/speculation.md) ----------------------------------------------


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
    levels = _same_levels(adaptive, base, fixed)
    rows, slower, levels_evidence, warnings = [], [], [], []
    for level, a, b, f in zip(levels, adaptive, base, fixed, strict=True):
        # Both references are compared, so either too small to ever decide is refused.
        vs_base, vs_fixed = (_compare(a, other, metric, by, alpha) for other in (b, f))
        mb, mf = vs_base.median_b, vs_fixed.median_b
        best, c = (b, vs_base) if (mb >= mf) == vs_base.larger_is_better else (f, vs_fixed)
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
    larger = metric_spec(metric).larger_is_better  # a load metric is refused by _compare
    rows: list[dict[str, Any]] = []
    config: dict[str, dict[str, Any]] = {}
    for index, level in enumerate(_same_levels(base, *fixed.values())):
        # Every sweep is compared, so one too small to ever decide is refused, chosen or not.
        compared = {
            s: _compare(sw.points[index], base.points[index], metric, 1.0, alpha)
            for s, sw in fixed.items()
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
