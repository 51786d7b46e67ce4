"""The session's baselines: save its measurements, judge each against its stored counterpart.

Registered on the controller of a session that saves or compares; it reads each report's
records through ``report_entries``, alike with and without xdist (``docs/baselines.md``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import pytest

from pytest_sglang.report.entries import (
    MeasurementRow,
    ServerEntry,
    as_row,
    unique_measurements,
)
from pytest_sglang.report.junit import add_entry, report_entries
from pytest_sglang.verdicts.baseline_options import (
    NOTHING_COMPARED_OK,
    BaselineOptions,
    RegressionCheck,
)

if TYPE_CHECKING:
    from pytest_sglang.measure.session_format import StoredMeasurement
    from pytest_sglang.verdicts.assertions import Verdict

__all__ = ["BaselineGate", "Judged", "judge", "register_gate"]

GATE_NAME = "sglang-baselines"


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
    from pytest_sglang.measure.session_format import find_counterpart
    from pytest_sglang.verdicts.regression import regression_verdicts

    label = f"{fresh.row['server']} @ C={fresh.row['concurrency']}"
    match, near = find_counterpart(fresh.fingerprint, candidates)
    if match is None and near:
        fields = "; ".join(fresh.fingerprint.differences(near[0].fingerprint, refused=True))
        return [Judged(label, "refused", f"{near[0].session}: fields differ: {fields}")]
    if match is None:
        return [Judged(label, "none", "no stored measurement with its fingerprint")]
    verdicts = regression_verdicts(
        fresh.result,
        match,
        checks,
        alpha,
        fresh_fingerprint=fresh.fingerprint,
        fresh_labels=fresh.labels,
    )
    return [
        Judged(label, "refused", v)
        if isinstance(v, str)
        else Judged(label, v.as_dict()["outcome"], v.summary, v)
        for v in verdicts
    ]


@dataclass
class BaselineGate:
    """Saves the session's measurements and judges them against stored ones."""

    config: pytest.Config
    options: BaselineOptions
    rows: list[MeasurementRow] = field(default_factory=list)
    servers: list[ServerEntry] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    #: What was judged, by test.
    outcomes: list[tuple[str, Judged]] = field(default_factory=list)
    #: Every verdict row of the session (the tests' and the gate's), saved with it.
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    saved: str | None = None
    #: Why the gate passed nothing, when it compared nothing (``--sglang-compare-fail``).
    nothing_compared: str | None = None
    save_error: str | None = None
    _candidates: list[StoredMeasurement] | None = None
    _candidates_error: str | None = None

    def candidates(self) -> list[StoredMeasurement]:
        """Return the stored measurements ``--sglang-compare`` refers to (read once)."""
        if self._candidates is None:
            self._candidates = []
            try:
                self._candidates = self.options.store().measurements(
                    self.options.compare or "latest"
                )
            except (LookupError, OSError, ValueError) as exc:
                self._candidates_error = str(exc)
        return self._candidates

    @functools.cached_property
    def commit(self) -> dict[str, Any]:
        """The tested tree's commit (read once)."""
        from pytest_sglang.measure.session_format import commit_info

        return commit_info()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the report's new records; judge new measurements before anyone else sees it."""
        fresh, test = report_entries(report), report.nodeid
        measured = [
            cast("MeasurementRow", as_row(e, test)) for e in fresh if e["record"] == "measurement"
        ]
        self.rows += measured
        self.servers += [e for e in fresh if e["record"] == "server"]
        self.gpus = next(
            (list(e["names"]) for e in fresh[::-1] if e["record"] == "gpus"), self.gpus
        )
        self.verdicts += [as_row(e, test) for e in fresh if e["record"] == "verdict"]
        if self.options.compare and measured:
            self._judge(report, measured)

    def _judge(self, report: pytest.TestReport, rows: list[MeasurementRow]) -> None:
        from pytest_sglang.measure.session_format import (
            StoredMeasurement,
            fingerprint_of,
            server_for,
            session_labels,
        )

        failures: list[str] = []
        for row in rows:
            server = server_for(row, self.servers)
            fingerprint = fingerprint_of(row, server, self.gpus)
            labels = session_labels("now", [server] if server else [], self.commit, "")
            fresh = StoredMeasurement(row, fingerprint, "now", labels)
            for judged in judge(fresh, self.candidates(), self.options.checks):
                if judged.outcome == "none" and self._candidates_error:
                    judged = judged._replace(text=self._candidates_error)
                self.outcomes.append((report.nodeid, judged))
                if judged.verdict is None:
                    continue
                body = judged.verdict.as_dict()
                add_entry(report, {"record": "verdict", **body})
                self.verdicts.append({"test": report.nodeid, **body})
                if self.options.fail and judged.outcome == "fail":
                    failures.append(judged.verdict.message())
        if failures and not report.failed:
            terms = ", ".join(c.describe() for c in self.options.checks)
            report.outcome = "failed"
            report.longrepr = (
                f"performance regression against the stored baseline (--sglang-compare-fail "
                f"{terms}):\n\n" + "\n\n".join(failures)
            )

    def _fail(self, session: pytest.Session) -> None:
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _count(self, outcome: str) -> int:
        return sum(1 for _, judged in self.outcomes if judged.outcome == outcome)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Fail a gate that compared nothing; save the session's measurements, when asked to."""
        if self.config.option.collectonly:
            return
        options = self.options
        judged = any(j.outcome in ("pass", "fail", "inconclusive") for _, j in self.outcomes)
        if options.compare and options.fail and not judged:
            why = (
                f"{self._count('refused')} measurement(s) refused, {self._count('none')} "
                "without a stored counterpart"
                if self.outcomes
                else "no measurement was taken"
            )
            if options.nothing_compared_ok:
                self.nothing_compared = (
                    f"nothing was compared (allowed by {NOTHING_COMPARED_OK}): {why}"
                )
            else:
                self.nothing_compared = (
                    f"the gate compared nothing: {why}; a regression gate (--sglang-compare-fail) "
                    "that compared nothing has not passed: save a comparable baseline first, or "
                    f"add the term {NOTHING_COMPARED_OK} to let such a session pass"
                )
                self._fail(session)
        if options.save or options.autosave:
            self._save(session, exitstatus == pytest.ExitCode.INTERRUPTED)

    def _save(self, session: pytest.Session, interrupted: bool) -> None:
        """Save the session's measurements, each once; a lost save fails the session, loudly."""
        from pytest_sglang.measure.session_format import autosave_name, build_document

        rows = unique_measurements(self.rows)
        if not rows:
            self.save_error = "not saving anything: no measurements were taken"
            return
        name = self.options.save or autosave_name(self.commit)
        servers = list({f"{s['name']} {s['url']}": s for s in self.servers}.values())
        store = self.options.store()
        document = build_document(
            name,
            rows,
            servers,
            self.gpus,
            commit=self.commit,
            verdicts=self.verdicts,
            interrupted=interrupted,
        )
        try:
            self.saved = store.save_document(name, document)
        except Exception as exc:  # a lost save must be loud: it is the next session's baseline
            self.save_error = (
                f"saving the baseline to {store} failed: {type(exc).__name__}: {exc}"
                + self._keep(name, document)
            )
            self._fail(session)

    def _keep(self, name: str, document: Mapping[str, Any]) -> str:
        """Write the session that could not be saved somewhere else; return what to say."""
        import tempfile
        from pathlib import Path

        from pytest_sglang.config.settings import SETTINGS_KEY
        from pytest_sglang.report.writing import json_text, write_atomic

        settings = self.config.stash.get(SETTINGS_KEY, None)
        report = getattr(getattr(settings, "report", None), "value", None)
        folders = [Path(report).parent] if report is not None else []
        folders += [Path(self.config.invocation_params.dir), Path(tempfile.gettempdir())]
        problems = []
        for folder in folders:
            names = (
                f"sglang-unsaved_{name}" + (f"-{n}" if n > 1 else "") for n in itertools.count(1)
            )
            path = next(p for p in (folder / f"{n}.json" for n in names) if not p.exists())
            try:
                write_atomic(path, json_text(document))
            except OSError as exc:
                problems.append(f"{folder}: {exc.strerror or exc}")
                continue
            return (
                f"; the session was written to {path} instead: compare with it "
                f"(--sglang-compare={path}), or move it into the store as NNNN_{name}.json"
            )
        return "; it could not be written elsewhere either (" + "; ".join(problems) + ")"

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Say what was compared, what had no counterpart, and where the session was saved."""
        tr, options = terminalreporter, self.options
        if not (self.outcomes or self.saved or self.save_error or options.compare):
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
            if self._count("none"):
                tr.write_line(f"  {self._count('none')} measurement(s) had no stored counterpart")
            if self.nothing_compared:
                tr.write_line(f"  {self.nothing_compared}", red=not options.nothing_compared_ok)
        if self.saved:
            tr.write_line(
                f"saved {len(unique_measurements(self.rows))} measurement(s) to {self.saved}"
            )
        if self.save_error:
            tr.write_line(self.save_error, red=True)


def register_gate(config: pytest.Config, options: BaselineOptions) -> BaselineGate:
    """Check the storage and the stored sessions now, then register the gate on the controller.

    :raises pytest.UsageError: on an unwritable storage or a damaged stored session.
    """
    from pytest_sglang.config.options import COMPARE, SAVE, STORAGE
    from pytest_sglang.measure.session_format import DamagedSession

    gate = BaselineGate(config, options)
    check = not config.option.collectonly
    if check and (options.save or options.autosave):
        try:
            options.store().check_writable()
        except OSError as exc:
            raise pytest.UsageError(
                f"{SAVE.label}: the session could not be saved there: {exc}; fix the storage "
                f"or give another ({STORAGE.label})"
            ) from None
    if check and options.compare:
        try:
            options.store().check_reachable()
            gate.candidates()
        except (DamagedSession, OSError) as exc:
            raise pytest.UsageError(f"{COMPARE.label}={options.compare}: {exc}") from None
    config.pluginmanager.register(gate, GATE_NAME)
    return gate
