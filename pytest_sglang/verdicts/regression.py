"""Regression verdicts: a fresh measurement judged against a stored one.

A non-inferiority verdict with the statistics of ``assert_faster``: every stored run enters
the rank test, tested against the margin ``1 - tolerance`` (``docs/baselines.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.options import DEFAULT_STORAGE
from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.measure.session_format import (
    DamagedSession,
    Fingerprint,
    StoredMeasurement,
    find_counterpart,
    fingerprint_of,
)
from pytest_sglang.measure.store import BaselineStore
from pytest_sglang.report.context import CURRENT_ITEM
from pytest_sglang.report.entries import VerdictKind
from pytest_sglang.verdicts.assertions import Verdict, _compare, conclude
from pytest_sglang.verdicts.baseline_options import RegressionCheck, baseline_options
from pytest_sglang.verdicts.decision import Comparison, Outcome

# pytest reads __tracebackhide__ from a frame's globals too: a failed or refused verdict's
# traceback shows the test's line, none of this module's frames.
__tracebackhide__ = True

__all__ = [
    "MIN_BASELINE_RUNS",
    "assert_no_regression",
    "regression_verdict",
    "regression_verdicts",
]

#: Runs a baseline needs at least (docs/baselines.md, "How many runs").
MIN_BASELINE_RUNS = 5
#: The stored and fresh labels a regression's table shows.
_LABELS = ("sglang_version", "commit", "name", "datetime")


def _margin(metric: str, tolerance: float) -> tuple[bool, float]:
    larger = metric_spec(metric).larger_is_better
    if larger is None:
        raise ComparisonRefused(f"{metric!r} describes the load and cannot regress")
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance!r}")
    return larger, (1.0 - tolerance) if larger else 1.0 / (1.0 + tolerance)


def _raw(c: Comparison) -> tuple[float, float, float, float]:
    """Return now/stored in the metric's own units: ratio, its bounds low and high, margin."""
    if c.larger_is_better:
        return c.ratio, c.lower_bound, c.upper_bound, c.by
    return 1.0 / c.ratio, 1.0 / c.upper_bound, 1.0 / c.lower_bound, 1.0 / c.by


def _summary(c: Comparison, metric: str, tolerance: float, what: str) -> str:
    ratio, low, high, bound = _raw(c)
    conf = f"{c.confidence:.1%}"
    head = f"assert_no_regression({what}) on {metric}"
    tol = f"{100 * tolerance:g}% tolerance"
    shown = f"now/stored = {ratio:.4f}, {conf}"
    if c.outcome is not Outcome.INCONCLUSIVE:
        failed = c.outcome is Outcome.FAIL
        word, p = ("REGRESSION", c.p_value_fail) if failed else ("no regression", c.p_value)
        upper = failed == c.larger_is_better
        edge = f"upper bound {high:.4f} <" if upper else f"lower bound {low:.4f} >"
        return f"{head}: {word}: {shown} {edge} bound {bound:.4f} ({tol}), p = {p:.3g}"
    direction = "drop" if c.larger_is_better else "rise"
    return (
        f"{head}: INCONCLUSIVE: {shown} bounds [{low:.4f}, {high:.4f}] straddle the bound "
        f"{bound:.4f} ({tol}: a {100 * tolerance:g}% {direction} allowed) {c.undecided()}"
    )


def _labels_line(name: str, labels: Mapping[str, Any]) -> str:
    parts = [f"{k}={labels[k]}" for k in _LABELS if labels.get(k)]
    return f"{name}: " + (", ".join(parts) or "(no labels)")


def _warnings(c: Comparison, tolerance: float, stored: BenchResult) -> list[str]:
    out = []
    if len(stored.runs) < MIN_BASELINE_RUNS:
        out.append(
            f"the baseline has {len(stored.runs)} runs: save baselines with at least "
            f"{MIN_BASELINE_RUNS} (docs/baselines.md, 'How many runs')"
        )
    if 0 < tolerance < (c.cv_b or 0):
        out.append(
            f"the baseline's own run-to-run spread (CV {100 * (c.cv_b or 0):.1f}%) exceeds the "
            f"{100 * tolerance:g}% tolerance: only large regressions can be shown; measure more "
            "runs or steadier conditions"
        )
    if c.cv_a and c.cv_b and c.cv_a > max(3 * c.cv_b, 0.01):
        out.append(
            f"the fresh runs spread much more than the stored ones (CV {100 * c.cv_a:.1f}% vs "
            f"{100 * c.cv_b:.1f}%): the conditions changed, not only the build"
        )
    return out


def regression_verdict(
    fresh: BenchResult,
    stored: StoredMeasurement | BenchResult,
    metric: str = "output_throughput",
    tolerance: float = 0.03,
    alpha: float = 0.05,
    *,
    fresh_fingerprint: Fingerprint | None = None,
    fresh_labels: Mapping[str, Any] | None = None,
) -> Verdict:
    """Judge ``fresh`` against ``stored``; record and raise nothing but refusals."""
    _, by = _margin(metric, tolerance)
    if isinstance(stored, StoredMeasurement):
        base, stored_fp, labels, where = stored.result, stored.fingerprint, stored.labels, stored
    else:
        base, stored_fp, labels, where = stored, fingerprint_of(stored.as_dict()), {}, None
    mine = fresh_fingerprint or fingerprint_of(fresh.as_dict())
    what = f"{fresh.label()} vs {where.label() if where else base.label() + ' (stored)'}"
    if refused := mine.differences(stored_fp, refused=True):
        raise ComparisonRefused(
            f"cannot compare {what}: the fingerprints differ in what must match:\n  "
            + "\n  ".join(refused)
        )
    comparison = _compare(fresh, base, metric, by, alpha, ("now", "stored"), what)
    ratio, low, high, bound = _raw(comparison)
    lines = [
        comparison.table(),
        _labels_line("now", fresh_labels or {}),
        _labels_line("stored", labels),
        *(f"shown, not refused: {d}" for d in mine.differences(stored_fp, refused=False)),
        f"fingerprint: {mine.describe()}",
    ]
    summary = _summary(comparison, metric, tolerance, what)
    evidence = {
        "a": fresh.label(),
        "b": where.label() if where else base.label(),
        "workload": fresh.workload.as_dict(),
        "comparison": comparison.as_dict(),
        "tolerance": tolerance,
        "bound": bound,
        "ratio_now_stored": ratio,
        "bounds_now_stored": [low, high],
        "fingerprint": mine.as_dict(),
        "fingerprint_key": mine.key,
        "stored_session": where.session if where else None,
        "stored_labels": dict(labels),
        "regression": comparison.outcome is Outcome.FAIL,
    }
    table, warnings = "\n".join(lines), _warnings(comparison, tolerance, base)
    kind: VerdictKind = "assert_no_regression"
    return Verdict(kind, comparison.outcome, metric, summary, table, evidence, warnings)


def regression_verdicts(
    fresh: BenchResult,
    stored: StoredMeasurement,
    checks: Sequence[RegressionCheck],
    alpha: float = 0.05,
    *,
    fresh_fingerprint: Fingerprint,
    fresh_labels: Mapping[str, Any],
) -> list[Verdict | str]:
    """Judge ``fresh`` against ``stored`` once per check: the verdict, or why it was refused."""
    out: list[Verdict | str] = []
    for check in checks:
        try:
            out.append(
                regression_verdict(
                    fresh,
                    stored,
                    check.metric,
                    check.tolerance,
                    alpha,
                    fresh_fingerprint=fresh_fingerprint,
                    fresh_labels=fresh_labels,
                )
            )
        except (ComparisonRefused, ValueError) as exc:
            out.append(str(exc))
    return out


def _store_for_current_test(storage: str | None) -> BaselineStore:
    item = CURRENT_ITEM.get()
    if item is None:  # outside a test: relative to the working directory
        return BaselineStore(DEFAULT_STORAGE if storage is None else storage)
    if storage is None:
        return baseline_options(item.config).store()
    return BaselineStore(storage, base=Path(item.config.invocation_params.dir))


def assert_no_regression(
    result: BenchResult,
    baseline: StoredMeasurement | BenchResult | str = "latest",
    metric: str = "output_throughput",
    tolerance: float = 0.03,
    alpha: float = 0.05,
    *,
    storage: str | None = None,
) -> Verdict:
    """Assert that ``result`` did not regress by more than ``tolerance`` against ``baseline``.

    ``baseline`` is a stored measurement, a ``BenchResult``, or a reference into the store
    (``storage``, else ini ``sglang_storage``): ``"latest"`` with the same fingerprint, a
    session number or name, or a saved file. Skips when nothing comparable is stored yet.
    """
    stored: StoredMeasurement | BenchResult
    if isinstance(baseline, str):
        store = _store_for_current_test(storage)
        fingerprint = fingerprint_of(result.as_dict())
        try:
            match, near = find_counterpart(fingerprint, store.measurements(baseline))
        except DamagedSession as exc:  # never skipped: it may be the latest
            raise ComparisonRefused(str(exc)) from None
        except LookupError as exc:
            if baseline == "latest":
                pytest.skip(f"no stored baseline to compare {result.label()} with: {exc}")
            raise ComparisonRefused(str(exc)) from None
        if match is None and not near:
            pytest.skip(
                f"no stored baseline with the fingerprint of {result.label()} in {store} "
                f"({fingerprint.describe()}); save one with --sglang-save NAME"
            )
        stored = near[0] if match is None else match  # a near miss: refused with its fields
    else:
        stored = baseline
    return conclude(regression_verdict(result, stored, metric, tolerance, alpha))
