"""The session's baselines: save its measurements, judge each against its stored counterpart.

Registered on the controller of a session that saves or compares; it judges each report's
measurements (``report_entries``) before the reporter files them, and saves the reporter's
records, alike with and without xdist (``docs/baselines.md``).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import pytest

from pytest_sglang.report.entries import MeasurementRow, as_row, unique_measurements
from pytest_sglang.report.junit import add_entry, report_entries
from pytest_sglang.verdicts.baseline_options import (
    NOTHING_COMPARED_OK,
    BaselineOptions,
    RegressionCheck,
)

if TYPE_CHECKING:
    from pytest_sglang.measure.session_format import StoredMeasurement
    from pytest_sglang.report.collector import SGLangReporter
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
    from pytest_sglang.errors import ComparisonRefused
    from pytest_sglang.measure.session_format import find_counterpart
    from pytest_sglang.verdicts.regression import regression_verdict

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
            v = regression_verdict(
                fresh.result,
                match,
                check.metric,
                check.tolerance,
                alpha,
                fresh_fingerprint=fresh.fingerprint,
                fresh_labels=fresh.labels,
            )
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
    #: What was judged, by test.
    outcomes: list[tuple[str, Judged]] = field(default_factory=list)
    #: What the summary says last, and whether in red: a gate that compared nothing, the save.
    notes: list[tuple[str, bool]] = field(default_factory=list)

    @functools.cached_property
    def stored(self) -> tuple[list[StoredMeasurement], str | None]:
        """The stored measurements ``--sglang-compare`` refers to, or why none (read once)."""
        try:
            return self.options.store().measurements(self.options.compare or "latest"), None
        except (LookupError, OSError, ValueError) as exc:
            return [], str(exc)

    @functools.cached_property
    def commit(self) -> dict[str, Any]:
        """The tested tree's commit (read once)."""
        from pytest_sglang.measure.session_format import commit_info

        return commit_info()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Judge the report's new measurements before anyone else sees it (the reporter too)."""
        if not self.options.compare:
            return
        from pytest_sglang.measure.session_format import (
            StoredMeasurement,
            fingerprint_of,
            server_for,
            session_labels,
        )

        entries = report_entries(report)
        # The reporter files this report after the gate: its servers and GPUs are added here.
        servers = self.records.servers + [e for e in entries if e["record"] == "server"]
        gpus = next((e["names"] for e in entries[::-1] if e["record"] == "gpus"), self.records.gpus)
        candidates, unread = self.stored
        failures: list[str] = []
        for entry in entries:
            if entry["record"] != "measurement":
                continue
            row = cast("MeasurementRow", as_row(entry, report.nodeid))
            server = server_for(row, servers)
            fingerprint = fingerprint_of(row, server, gpus)
            labels = session_labels("now", [server] if server else [], self.commit, "")
            fresh = StoredMeasurement(row, fingerprint, "now", labels)
            for judged in judge(fresh, candidates, self.options.checks):
                if judged.outcome == "none" and unread:
                    judged = judged._replace(text=unread)
                self.outcomes.append((report.nodeid, judged))
                if judged.verdict is None:
                    continue
                body = judged.verdict.as_dict()
                add_entry(report, {"record": "verdict", **body})
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
                note = f"nothing was compared (allowed by {NOTHING_COMPARED_OK}): {why}"
            else:
                note = (
                    f"the gate compared nothing: {why}; a regression gate (--sglang-compare-fail) "
                    "that compared nothing has not passed: save a comparable baseline first, or "
                    f"add the term {NOTHING_COMPARED_OK} to let such a session pass"
                )
                self._fail(session)
            self.notes.append((f"  {note}", not options.nothing_compared_ok))
        if options.save or options.autosave:
            self._save(session, exitstatus == pytest.ExitCode.INTERRUPTED)

    def _save(self, session: pytest.Session, interrupted: bool) -> None:
        """Save the session's measurements, each once; a lost save fails the session, loudly."""
        from pytest_sglang.measure.session_format import autosave_name, build_document

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
            self._fail(session)
            return
        self.notes.append((f"saved {len(rows)} measurement(s) to {where}", False))

    def _keep(self, name: str, document: Mapping[str, Any]) -> str:
        """Write the session that could not be saved somewhere else; return what to say."""
        import tempfile
        from pathlib import Path

        from pytest_sglang.report.writing import json_text, write_atomic

        report = self.records.path  # --sglang-report's
        folders = [report.parent] if report is not None else []
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
        if not (self.outcomes or self.notes or options.compare):
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
        for line, red in self.notes:
            tr.write_line(line, red=red)


def register_gate(
    config: pytest.Config, options: BaselineOptions, records: SGLangReporter
) -> BaselineGate:
    """Check the storage and the stored sessions now, then register the gate on the controller.

    ``records`` is the session's reporter, registered already: it keeps the records.

    :raises pytest.UsageError: on an unwritable storage or a damaged stored session.
    """
    from pytest_sglang.config.options import COMPARE, SAVE, STORAGE
    from pytest_sglang.measure.session_format import DamagedSession

    gate = BaselineGate(config, options, records)
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
            gate.stored  # noqa: B018 (read now: a damaged stored session stops the session)
        except (DamagedSession, OSError) as exc:
            raise pytest.UsageError(f"{COMPARE.label}={options.compare}: {exc}") from None
    config.pluginmanager.register(gate, GATE_NAME)
    return gate
