"""Baselines: fresh measurements judged against stored ones, in a test and for the session.

``assert_no_regression`` is a non-inferiority verdict with the statistics of
``assert_faster``: every stored run enters the rank test, tested against the margin
``1 - tolerance``. The session's gate (:class:`BaselineGate`, registered on the controller of
a session that saves or compares) judges each report's measurements (``report_entries``) with
the same verdict before the reporter files them, and saves the reporter's records, alike with
and without xdist (``docs/baselines.md``).
"""

from __future__ import annotations

import itertools
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import pytest

from pytest_sglang.config.options import COMPARE, DEFAULT_STORAGE, SAVE, STORAGE
from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.measure.session_format import (
    DamagedSession,
    Fingerprint,
    StoredMeasurement,
    autosave_name,
    build_document,
    commit_info,
    find_counterpart,
    fingerprint_of,
    server_for,
    session_labels,
)
from pytest_sglang.measure.store import BaselineStore
from pytest_sglang.report.entries import CURRENT_ITEM, MeasurementRow, as_row, unique_measurements
from pytest_sglang.report.junit import add_entry, report_entries
from pytest_sglang.report.writing import json_text, write_atomic
from pytest_sglang.verdicts.assertions import Verdict, _compare, conclude
from pytest_sglang.verdicts.baseline_options import (
    NOTHING_COMPARED_OK,
    BaselineOptions,
    RegressionCheck,
    baseline_options,
)
from pytest_sglang.verdicts.decision import Comparison, Outcome

if TYPE_CHECKING:
    from pytest_sglang.report.collector import SGLangReporter

__all__ = [
    "MIN_BASELINE_RUNS",
    "BaselineGate",
    "Judged",
    "assert_no_regression",
    "judge",
    "register_gate",
    "regression_verdict",
]

#: Runs a baseline needs at least (docs/baselines.md, "How many runs").
MIN_BASELINE_RUNS = 5
#: The stored and fresh labels a regression's table shows.
_LABELS = ("sglang_version", "commit", "name", "datetime")


# The verdict's functions hide their frames (``__tracebackhide__``): a refused or failed
# verdict's traceback shows the test's line. The gate's frames stay in internal errors.


def _margin(metric: str, tolerance: float) -> tuple[bool, float]:
    """Return whether larger is better for ``metric``, and the margin ``tolerance`` allows."""
    __tracebackhide__ = True
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
    head = f"assert_no_regression({what}) on {metric}"
    shown = f"now/stored = {ratio:.4f}, {c.confidence:.1%}"
    tol = f"{100 * tolerance:g}% tolerance"
    if c.outcome is Outcome.INCONCLUSIVE:
        direction = "drop" if c.larger_is_better else "rise"
        return (
            f"{head}: INCONCLUSIVE: {shown} bounds [{low:.4f}, {high:.4f}] straddle the bound "
            f"{bound:.4f} ({tol}: a {100 * tolerance:g}% {direction} allowed) {c.undecided()}"
        )
    failed = c.outcome is Outcome.FAIL
    word, p = ("REGRESSION", c.p_value_fail) if failed else ("no regression", c.p_value)
    upper = failed == c.larger_is_better
    edge = f"upper bound {high:.4f} <" if upper else f"lower bound {low:.4f} >"
    return f"{head}: {word}: {shown} {edge} bound {bound:.4f} ({tol}), p = {p:.3g}"


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


def _side(
    side: StoredMeasurement | BenchResult,
) -> tuple[BenchResult, Fingerprint, Mapping[str, Any]]:
    """Return a side's result, fingerprint and labels (a bare result has no labels)."""
    if isinstance(side, StoredMeasurement):
        return side.result, side.fingerprint, side.labels
    return side, fingerprint_of(side.as_dict()), {}


def regression_verdict(
    fresh: StoredMeasurement | BenchResult,
    stored: StoredMeasurement | BenchResult,
    metric: str = "output_throughput",
    tolerance: float = 0.03,
    alpha: float = 0.05,
) -> Verdict:
    """Judge ``fresh`` against ``stored``; record and raise nothing but refusals.

    Either side is a bare result or a measurement with its fingerprint and labels (the gate's).
    """
    __tracebackhide__ = True
    _, by = _margin(metric, tolerance)
    now, mine, now_labels = _side(fresh)
    base, stored_fp, labels = _side(stored)
    where = stored if isinstance(stored, StoredMeasurement) else None
    what = f"{now.label()} vs {where.label() if where else base.label() + ' (stored)'}"
    if refused := mine.differences(stored_fp, refused=True):
        raise ComparisonRefused(
            f"cannot compare {what}: the fingerprints differ in what must match:\n  "
            + "\n  ".join(refused)
        )
    comparison = _compare(now, base, metric, by, alpha, ("now", "stored"), what)
    ratio, low, high, bound = _raw(comparison)
    lines = [
        comparison.table(),
        _labels_line("now", now_labels),
        _labels_line("stored", labels),
        *(f"shown, not refused: {d}" for d in mine.differences(stored_fp, refused=False)),
        f"fingerprint: {mine.describe()}",
    ]
    summary = _summary(comparison, metric, tolerance, what)
    evidence = {
        "a": now.label(),
        "b": where.label() if where else base.label(),
        "workload": now.workload.as_dict(),
        "comparison": comparison.as_dict(),
        "tolerance": tolerance,
        "bound": bound,
        "ratio_now_stored": ratio,
        "bounds_now_stored": [low, high],
        "fingerprint": dict(mine.fields),
        "fingerprint_key": mine.key,
        "stored_session": where.session if where else None,
        "stored_labels": dict(labels),
        "regression": comparison.outcome is Outcome.FAIL,
    }
    table, warnings = "\n".join(lines), _warnings(comparison, tolerance, base)
    return Verdict(
        "assert_no_regression", comparison.outcome, metric, summary, table, evidence, warnings
    )


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
    __tracebackhide__ = True
    if isinstance(baseline, str):
        item = CURRENT_ITEM.get()  # outside a test: the storage relative to the working directory
        if item is not None and storage is None:
            store = baseline_options(item.config).store()
        else:
            base = Path(item.config.invocation_params.dir) if item is not None else None
            store = BaselineStore(storage or DEFAULT_STORAGE, base=base)
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
        baseline = near[0] if match is None else match  # a near miss: refused with its fields
    return conclude(regression_verdict(result, baseline, metric, tolerance, alpha))


# -- the session's gate ------------------------------------------------------------------------


class Judged(NamedTuple):
    """One measurement judged against the stored ones: an outcome, for one check or for all."""

    label: str
    outcome: str  # pass / fail / inconclusive / refused / none
    text: str
    verdict: Verdict | None = None

    @property
    def tag(self) -> str:
        """Return what the outcome is shown as: ``PASS``, ``REFUSED``, ``NO BASELINE``..."""
        return "NO BASELINE" if self.outcome == "none" else self.outcome.upper()


def judge(
    fresh: StoredMeasurement,
    candidates: Sequence[StoredMeasurement],
    checks: Sequence[RegressionCheck],
    alpha: float = 0.05,
) -> list[Judged]:
    """Judge ``fresh`` against its newest counterpart in ``candidates``, once per check.

    Without a counterpart, one outcome says why: ``refused`` (a near miss's fields that must
    match and differ) or ``none``.
    """
    label = f"{fresh.row['server']} @ C={fresh.row['concurrency']}"
    match, near = find_counterpart(fresh.fingerprint, candidates)
    if match is None and near:
        fields = "; ".join(fresh.fingerprint.differences(near[0].fingerprint, refused=True))
        return [Judged(label, "refused", f"{near[0].session}: fields differ: {fields}")]
    if match is None:
        return [Judged(label, "none", "no stored measurement with its fingerprint")]
    out = []
    for check in checks:
        try:
            v = regression_verdict(fresh, match, check.metric, check.tolerance, alpha)
        except (ComparisonRefused, ValueError) as exc:
            out.append(Judged(label, "refused", str(exc)))
        else:
            out.append(Judged(label, v.as_dict()["outcome"], v.summary, v))
    return out


@dataclass
class BaselineGate:
    """Saves the session's measurements and judges them against stored ones."""

    config: pytest.Config
    options: BaselineOptions
    #: The session's records (servers, GPUs, measurements, verdicts: the gate's too).
    records: SGLangReporter
    #: The stored measurements ``--sglang-compare`` refers to (read by :func:`register_gate`).
    stored: list[StoredMeasurement] = field(default_factory=list)
    #: Why none could be read (nothing stored yet): each measurement's ``NO BASELINE`` says it.
    unread: str | None = None
    #: The tested tree's commit, read when the session starts.
    commit: dict[str, Any] = field(default_factory=commit_info)
    #: What was judged, by test.
    outcomes: list[tuple[str, Judged]] = field(default_factory=list)
    #: What the summary says last, and whether in red: a gate that compared nothing, the save.
    notes: list[tuple[str, bool]] = field(default_factory=list)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Judge the report's new measurements before anyone else sees it (the reporter too)."""
        if not self.options.compare:
            return
        entries = report_entries(report)
        # The reporter files this report after the gate: its servers and GPUs are added here.
        servers = self.records.servers + [e for e in entries if e["record"] == "server"]
        gpus = next((e["names"] for e in entries[::-1] if e["record"] == "gpus"), self.records.gpus)
        failures: list[str] = []
        for entry in (e for e in entries if e["record"] == "measurement"):
            row = cast("MeasurementRow", as_row(entry, report.nodeid))
            server = server_for(row, servers)
            labels = session_labels("now", [server] if server else [], self.commit, "")
            fresh = StoredMeasurement(row, fingerprint_of(row, server, gpus), "now", labels)
            for judged in judge(fresh, self.stored, self.options.checks):
                if judged.outcome == "none" and self.unread:
                    judged = judged._replace(text=self.unread)
                self.outcomes.append((report.nodeid, judged))
                if judged.verdict is None:
                    continue
                add_entry(report, {"record": "verdict", **judged.verdict.as_dict()})
                if self.options.fail and judged.outcome == "fail":
                    failures.append(judged.verdict.message())
        if failures and not report.failed:
            terms = ", ".join(c.describe() for c in self.options.checks)
            report.outcome = "failed"
            report.longrepr = (
                f"performance regression against the stored baseline (--sglang-compare-fail "
                f"{terms}):\n\n" + "\n\n".join(failures)
            )

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Fail a gate that compared nothing; save the session's measurements, when asked to."""
        if self.config.option.collectonly:
            return
        options, counts = self.options, Counter(j.outcome for _, j in self.outcomes)
        if options.compare and options.fail and not any(j.verdict for _, j in self.outcomes):
            why = (
                f"{counts['refused']} measurement(s) refused, {counts['none']} without a stored "
                "counterpart"
                if self.outcomes
                else "no measurement was taken"
            )
            if options.nothing_compared_ok:
                note = f"nothing was compared (allowed by {NOTHING_COMPARED_OK}): {why}"
            else:
                note = (
                    f"the gate compared nothing: {why}; a regression gate (--sglang-compare-fail) "
                    "that compared nothing has not passed: save a comparable baseline first, or "
                    f"add the term {NOTHING_COMPARED_OK} to let such a session pass"
                )
                # OK becomes failed; a worse status (interrupted, internal error) stays.
                session.exitstatus = session.exitstatus or pytest.ExitCode.TESTS_FAILED
            self.notes.append((f"  {note}", not options.nothing_compared_ok))
        if options.save or options.autosave:
            self._save(session, exitstatus == pytest.ExitCode.INTERRUPTED)

    def _save(self, session: pytest.Session, interrupted: bool) -> None:
        """Save the session's measurements, each once; a lost save fails the session, loudly."""
        records = self.records
        rows = unique_measurements(records.measurements)
        if not rows:
            self.notes.append(("not saving anything: no measurements were taken", True))
            return
        name = self.options.save or autosave_name(self.commit)
        store = self.options.store()
        document = build_document(
            name,
            rows,
            records.latest_servers(),
            records.gpus,
            commit=self.commit,
            verdicts=records.verdicts,
            interrupted=interrupted,
        )
        try:
            where = store.save(name, document)
        except Exception as exc:  # a lost save must be loud: it is the next session's baseline
            error = f"saving the baseline to {store} failed: {type(exc).__name__}: {exc}"
            self.notes.append((error + self._keep(name, document), True))
            session.exitstatus = session.exitstatus or pytest.ExitCode.TESTS_FAILED  # as above
        else:
            self.notes.append((f"saved {len(rows)} measurement(s) to {where}", False))

    def _keep(self, name: str, document: Mapping[str, Any]) -> str:
        """Write the session that could not be saved somewhere else; return what to say."""
        report = self.records.path  # --sglang-report's
        folders = [report.parent] if report is not None else []
        folders += [Path(self.config.invocation_params.dir), Path(tempfile.gettempdir())]
        problems = []
        for folder in folders:
            stem = f"sglang-unsaved_{name}"
            names = itertools.chain([stem], (f"{stem}-{n}" for n in itertools.count(2)))
            path = next(p for p in (folder / f"{n}.json" for n in names) if not p.exists())
            try:
                write_atomic(path, json_text(document))
            except OSError as exc:
                problems.append(f"{folder}: {exc.strerror or exc}")
            else:
                return (
                    f"; the session was written to {path} instead: compare with it "
                    f"(--sglang-compare={path}), or move it into the store as NNNN_{name}.json"
                )
        return "; it could not be written elsewhere either (" + "; ".join(problems) + ")"

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Say what was compared, what had no counterpart, and where the session was saved."""
        tr, options = terminalreporter, self.options
        if not (self.notes or options.compare):  # outcomes come from a comparison only
            return
        tr.section("sglang baselines")
        if options.compare:
            terms = ", ".join(c.describe() for c in options.checks)
            mode = "regressions fail tests" if options.fail else "reported only"
            tr.write_line(
                f"compared with {options.compare!r} in {options.store()} ({terms}; {mode})"
            )
            if not self.outcomes:
                tr.write_line("  no measurement was taken in this session")
            for test, j in self.outcomes:
                red = j.outcome in ("fail", "refused")
                tr.write_line(f"  [{j.tag}] {test} {j.label}: {j.text}", red=red)
            if none := Counter(j.outcome for _, j in self.outcomes)["none"]:
                tr.write_line(f"  {none} measurement(s) had no stored counterpart")
        for line, red in self.notes:
            tr.write_line(line, red=red)


def register_gate(config: pytest.Config, options: BaselineOptions, records: SGLangReporter) -> None:
    """Check the storage and read the stored sessions now, then register the gate on the controller.

    ``records`` is the session's reporter, registered already: it keeps the records.

    :raises pytest.UsageError: on an unwritable or unreadable storage or a damaged stored session.
    """
    gate = BaselineGate(config, options, records)
    check, store = not config.option.collectonly, options.store()
    if check and (options.save or options.autosave):
        try:
            store.check_writable()
        except OSError as exc:
            raise pytest.UsageError(
                f"{SAVE.label}: the session could not be saved there: {exc}; fix the storage "
                f"or give another ({STORAGE.label})"
            ) from None
    if check and options.compare:
        try:
            store.check_reachable()
            gate.stored = store.measurements(options.compare)
        except (DamagedSession, OSError) as exc:
            raise pytest.UsageError(f"{COMPARE.label}={options.compare}: {exc}") from None
        except (LookupError, ValueError) as exc:
            gate.unread = str(exc)
    config.pluginmanager.register(gate, "sglang-baselines")
