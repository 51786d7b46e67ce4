"""The session's baselines: save its measurements, judge each against its stored counterpart.

Registered on the controller when a session saves or compares; it reads each report's
records through ``report_entries``, so alike with and without xdist. The rules and the
storage are in ``docs/baselines.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pytest

from pytest_sglang.report.entries import (
    MeasurementRow,
    ServerEntry,
    VerdictEntry,
    as_row,
    unique_measurements,
)
from pytest_sglang.report.junit import add_entry, report_entries
from pytest_sglang.verdicts.baseline_options import BaselineOptions

if TYPE_CHECKING:
    from pytest_sglang.measure.session_format import StoredMeasurement

__all__ = ["BaselineGate", "register_gate"]

GATE_NAME = "sglang-baselines"


@dataclass
class _Outcome:
    test: str
    label: str
    outcome: str  # pass / fail / inconclusive / refused / none
    text: str


class BaselineGate:
    """Saves the session's measurements and judges them against stored ones."""

    def __init__(self, config: pytest.Config, options: BaselineOptions) -> None:
        self.config = config
        self.options = options
        self.rows: list[MeasurementRow] = []
        self.servers: list[ServerEntry] = []
        self.gpus: list[str] = []
        self.outcomes: list[_Outcome] = []
        #: Every verdict row of the session (the tests' and the gate's), saved with it.
        self.verdicts: list[dict[str, Any]] = []
        self.saved: str | None = None
        #: Why the gate passed nothing, when it compared nothing (``--sglang-compare-fail``).
        self.nothing_compared: str | None = None
        self.save_error: str | None = None
        self._candidates: list[StoredMeasurement] | None = None
        self._candidates_error: str | None = None
        self._commit: dict[str, Any] | None = None

    # -- the stored side ----------------------------------------------------------------------

    def candidates(self) -> list[StoredMeasurement]:
        """Return the stored measurements ``--sglang-compare`` refers to (read once).

        :raises DamagedSession: a stored session (or the report) it reads is damaged.
        """
        if self._candidates is None:
            from pathlib import Path

            from pytest_sglang.measure.session_format import read_document, report_measurements

            ref = self.options.compare or "latest"
            store = self.options.store()
            self._candidates = []
            try:
                path = Path(ref) if Path(ref).is_absolute() else self.options.base / ref
                if ref.endswith(".json") and path.is_file():
                    document = read_document(path)
                    if document.get("format") == "pytest-sglang-report":
                        self._candidates = report_measurements(document, str(path))
                        return self._candidates
                if ref == "latest":
                    sessions = store.sessions()
                    self._candidates = [m for s in sessions for m in s.measurements]
                else:
                    self._candidates = list(store.find(ref).measurements)
            except (LookupError, OSError, ValueError) as exc:
                self._candidates_error = str(exc)
        return self._candidates

    def commit(self) -> dict[str, Any]:
        """Return the tested tree's commit (read once)."""
        if self._commit is None:
            from pytest_sglang.measure.session_format import commit_info

            self._commit = commit_info()
        return self._commit

    # -- collection -----------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the report's new records; judge new measurements before anyone else sees it."""
        fresh = report_entries(report)
        if not fresh:
            return
        measured: list[MeasurementRow] = []
        for entry in fresh:
            if entry["record"] == "measurement":
                row = cast("MeasurementRow", as_row(entry, report.nodeid))
                self.rows.append(row)
                measured.append(row)
            elif entry["record"] == "server":
                self.servers.append(entry)
            elif entry["record"] == "gpus":
                self.gpus = list(entry["names"])
            elif entry["record"] == "verdict":
                self.verdicts.append(as_row(entry, report.nodeid))
        if self.options.compare and measured:
            self._judge(report, measured)

    def _judge(self, report: pytest.TestReport, rows: list[MeasurementRow]) -> None:
        from pytest_sglang.measure.session_format import (
            find_counterpart,
            fingerprint_of,
            result_of,
            server_for,
            session_labels,
        )
        from pytest_sglang.verdicts.regression import refused_fields, regression_verdicts

        candidates = self.candidates()
        failures: list[str] = []
        for row in rows:
            server = server_for(row, self.servers)
            fingerprint = fingerprint_of(row, server, self.gpus)
            label = f"{row['server']} @ C={row['concurrency']}"
            match, near = find_counterpart(fingerprint, candidates)
            if match is None:
                if near:
                    fields = "; ".join(refused_fields(fingerprint, near[0].fingerprint))
                    text = f"{near[0].session}: fields differ: {fields}"
                    self.outcomes.append(_Outcome(report.nodeid, label, "refused", text))
                else:
                    why = self._candidates_error or "no stored measurement with its fingerprint"
                    self.outcomes.append(_Outcome(report.nodeid, label, "none", why))
                continue
            labels = session_labels("now", [server] if server else [], self.commit(), "")
            for verdict in regression_verdicts(
                result_of(row),
                match,
                self.options.checks,
                fresh_fingerprint=fingerprint,
                fresh_labels=labels,
            ):
                if isinstance(verdict, str):
                    self.outcomes.append(_Outcome(report.nodeid, label, "refused", verdict))
                    continue
                entry: VerdictEntry = {"record": "verdict", **verdict.as_dict()}
                add_entry(report, entry)
                self.verdicts.append({"test": report.nodeid, **verdict.as_dict()})
                self.outcomes.append(
                    _Outcome(report.nodeid, label, entry["outcome"], verdict.summary)
                )
                if self.options.fail and entry["outcome"] == "fail":
                    failures.append(verdict.message())
        if failures and not report.failed:
            terms = ", ".join(c.describe() for c in self.options.checks)
            report.outcome = "failed"
            report.longrepr = (
                f"performance regression against the stored baseline (--sglang-compare-fail "
                f"{terms}):\n\n" + "\n\n".join(failures)
            )

    # -- the end ------------------------------------------------------------------------------

    def unique_rows(self) -> list[MeasurementRow]:
        """Return the measurements, each once (a cached one is recorded by every user)."""
        return unique_measurements(self.rows)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Fail a gate that compared nothing; save the session's measurements, when asked to."""
        if self.config.option.collectonly:
            return
        self._check_something_compared(session)
        if not (self.options.save or self.options.autosave):
            return
        rows = self.unique_rows()
        if not rows:
            self.save_error = "not saving anything: no measurements were taken"
            return
        from pytest_sglang.measure.session_format import autosave_name, build_document

        name = self.options.save or autosave_name(self.commit())
        servers = list({f"{s['name']} {s['url']}": s for s in self.servers}.values())
        store = self.options.store()
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        document = build_document(
            name,
            rows,
            servers,
            self.gpus,
            commit=self.commit(),
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
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _check_something_compared(self, session: pytest.Session) -> None:
        """Fail the session of a gate (``--sglang-compare-fail``) that compared nothing."""
        if not (self.options.compare and self.options.fail):
            return
        if any(o.outcome in ("pass", "fail", "inconclusive") for o in self.outcomes):
            return
        refused = sum(1 for o in self.outcomes if o.outcome == "refused")
        missing = sum(1 for o in self.outcomes if o.outcome == "none")
        why = (
            f"{refused} measurement(s) refused, {missing} without a stored counterpart"
            if self.outcomes
            else "no measurement was taken"
        )
        if self.options.nothing_compared_ok:
            self.nothing_compared = f"nothing was compared (allowed by nothing-compared:ok): {why}"
            return
        self.nothing_compared = (
            f"the gate compared nothing: {why}; a regression gate (--sglang-compare-fail) that "
            "compared nothing has not passed: save a comparable baseline first, or add the "
            "term nothing-compared:ok to let such a session pass"
        )
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _keep(self, name: str, document: Mapping[str, Any]) -> str:
        """Write the session that could not be saved somewhere else; return what to say."""
        import tempfile
        from pathlib import Path

        from pytest_sglang.config.settings import SETTINGS_KEY
        from pytest_sglang.measure.session_format import document_text
        from pytest_sglang.report.writing import write_atomic

        settings = self.config.stash.get(SETTINGS_KEY, None)
        report = getattr(getattr(settings, "report", None), "value", None)
        folders = [Path(report).parent] if report is not None else []
        folders += [Path(self.config.invocation_params.dir), Path(tempfile.gettempdir())]
        problems = []
        for folder in folders:
            path = folder / f"sglang-unsaved_{name}.json"
            number = 1
            while path.exists():
                number += 1
                path = folder / f"sglang-unsaved_{name}-{number}.json"
            try:
                write_atomic(path, document_text(document))
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
        tr = terminalreporter
        if not (
            self.outcomes
            or self.saved
            or self.save_error
            or self.options.compare
            or self.nothing_compared
        ):
            return
        tr.section("sglang baselines")
        store = self.options.store()
        if self.options.compare:
            terms = ", ".join(c.describe() for c in self.options.checks)
            mode = "regressions fail tests" if self.options.fail else "reported only"
            tr.write_line(f"compared with {self.options.compare!r} in {store} ({terms}; {mode})")
            if not self.outcomes:
                tr.write_line("  no measurement was taken in this session")
            for o in self.outcomes:
                tags = {"none": "NO BASELINE", "refused": "REFUSED"}
                tag = tags.get(o.outcome, o.outcome.upper())
                tr.write_line(
                    f"  [{tag}] {o.test} {o.label}: {o.text}", red=o.outcome in ("fail", "refused")
                )
            missing = sum(1 for o in self.outcomes if o.outcome == "none")
            if missing:
                tr.write_line(f"  {missing} measurement(s) had no stored counterpart")
            if self.nothing_compared:
                tr.write_line(
                    f"  {self.nothing_compared}", red=not self.options.nothing_compared_ok
                )
        if self.saved:
            tr.write_line(f"saved {len(self.unique_rows())} measurement(s) to {self.saved}")
        if self.save_error:
            tr.write_line(self.save_error, red=True)


def register_gate(config: pytest.Config, options: BaselineOptions) -> BaselineGate:
    """Register the gate on the controller of a session that saves or compares.

    Checks, before any test runs, that the storage takes a save and that the stored
    sessions a comparison reads are whole. ``plugin.py`` imports this module only for such
    a session (``options.active``).

    :raises pytest.UsageError: on an unwritable storage or a damaged stored session.
    """
    gate = BaselineGate(config, options)
    if not config.option.collectonly:
        _check_storage(gate)
    config.pluginmanager.register(gate, GATE_NAME)
    return gate


def _check_storage(gate: BaselineGate) -> None:
    """Refuse now what would fail after hours: an unwritable store, a damaged baseline."""
    from pytest_sglang.config.options import COMPARE, SAVE, STORAGE
    from pytest_sglang.measure.session_format import DamagedSession

    options = gate.options
    if options.save or options.autosave:
        try:
            options.store().check_writable()
        except OSError as exc:
            raise pytest.UsageError(
                f"{SAVE.label}: the session could not be saved there: {exc}; fix the storage "
                f"or give another ({STORAGE.label})"
            ) from None
    if options.compare:
        try:
            options.store().check_reachable()
            gate.candidates()
        except (DamagedSession, OSError) as exc:
            raise pytest.UsageError(f"{COMPARE.label}={options.compare}: {exc}") from None
