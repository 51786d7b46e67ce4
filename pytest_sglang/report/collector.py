"""The results report: the terminal summary, the JSON file and the Markdown summary.

Written on the controller from :func:`~pytest_sglang.report.junit.report_entries`, so alike
with and without xdist; the JSON is rewritten atomically after every test, so an interrupted
run leaves a valid report. A failed write is a warning, never the reason a run fails.
"""

from __future__ import annotations

import json
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.errors import SGLangWarning
from pytest_sglang.report.entries import (
    MeasurementRow,
    ServerEntry,
    ServerFailureRow,
    VerdictRow,
    as_row,
    unique_measurements,
)
from pytest_sglang.report.junit import report_entries

E = TypeVar("E", MeasurementRow, ServerEntry)

__all__ = ["REPORT_VERSION", "SGLangReporter"]

REPORT_VERSION = 1


# platform, tempfile, datetime and the summary (statistics) are imported where they are used:
# this module is loaded by pytest_configure in every run, results or not.


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _dedupe(entries: Sequence[E], key: Callable[[E], str], *, last: bool = False) -> list[E]:
    seen: dict[str, E] = {}
    for entry in entries:
        if last:
            seen.pop(key(entry), None)
            seen[key(entry)] = entry
        else:
            seen.setdefault(key(entry), entry)
    return list(seen.values())


def _with_launch(server: ServerEntry, by_pid: dict[Any, dict[str, Any]]) -> ServerEntry:
    launch = server.get("launch")
    if launch is None or launch.get("pid") not in by_pid:
        return server
    return cast("ServerEntry", {**server, "launch": by_pid[launch.get("pid")]})


_RATES = ("output_throughput", "total_throughput", "request_throughput")


def _table_rows(measurements: list[MeasurementRow]) -> list[MeasurementRow]:
    """Return the rows the tables show: a negative rate shows as unmeasured.

    A negative rate comes from a server that reported negative token counts (the test that
    measured it failed, saying so); it is no speed. The JSON keeps the values as measured.
    """
    rows = []
    for row in measurements:
        runs = [
            {
                **run,
                **{k: None for k in _RATES if isinstance(run.get(k), (int, float)) and run[k] < 0},
            }
            for run in row["runs"]
        ]
        rows.append(cast("MeasurementRow", {**row, "runs": runs}))
    return rows


class SGLangReporter:
    """Collects the session's results on the controller; prints and writes them."""

    def __init__(
        self,
        config: pytest.Config,
        path: Path | None,
        markdown: Path | None = None,
        *,
        redact: Redactor | None = None,
        launches: Callable[[], list[dict[str, Any]]] = list,
    ) -> None:
        self.config = config
        self.path = path
        self.markdown = markdown
        self.created = ""
        self.measurements: list[MeasurementRow] = []
        self.verdicts: list[VerdictRow] = []
        self.servers: list[ServerEntry] = []
        self.server_failures: list[ServerFailureRow] = []
        self.gpus: list[str] = []
        #: Outputs that could not be written: one line each (path and cause).
        self.problems: list[str] = []
        self._redact = redact or Redactor()
        #: The session's launches as plain dicts (the pool's records), read at each write.
        self._launches = launches
        self._written = False

    # -- collection -----------------------------------------------------------------------

    @pytest.hookimpl
    def pytest_sessionstart(self) -> None:
        """Note when the session started."""
        self.created = _now()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """File the ``sglang`` entries this report adds to its test (``report_entries``)."""
        fresh = report_entries(report)
        if not fresh:
            return
        for entry in fresh:
            if entry["record"] == "measurement":
                self.measurements.append(cast("MeasurementRow", as_row(entry, report.nodeid)))
            elif entry["record"] == "verdict":
                self.verdicts.append(cast("VerdictRow", as_row(entry, report.nodeid)))
            elif entry["record"] == "server":
                self.servers.append(entry)
            elif entry["record"] == "server_failure":
                self.server_failures.append(cast("ServerFailureRow", as_row(entry, report.nodeid)))
            elif entry["record"] == "gpus":
                self.gpus = list(entry["names"])
        self.write(complete=False)

    # -- output ---------------------------------------------------------------------------

    def document(
        self, *, complete: bool, interrupted: bool = False, exit_status: int | None = None
    ) -> dict[str, Any]:
        """Return the report as plain JSON types (see ``schemas/report.schema.json``)."""
        import platform

        from pytest_sglang._version import plugin_version

        measurements = self.unique_measurements()
        launches = self._launches()
        # The latest entry of a server says most (a launched server that died since), and
        # its launch record is the pool's latest, matched by pid.
        servers = _dedupe(self.servers, lambda s: f"{s['name']} {s['url']}", last=True)
        by_pid = {launch.get("pid"): launch for launch in launches if launch.get("pid")}
        servers = [_with_launch(s, by_pid) for s in servers]
        versions = sorted({str(s["version"]) for s in servers if s.get("version")})
        document: dict[str, Any] = {
            "format": "pytest-sglang-report",
            "version": REPORT_VERSION,
            "complete": complete,
            "interrupted": interrupted,
            "exit_status": exit_status,
            "created": self.created,
            "updated": _now(),
            "environment": {
                "plugin_version": plugin_version(),
                "python": sys.version.split()[0],
                "pytest": pytest.__version__,
                "platform": platform.platform(),
                "sglang_versions": versions,
                "gpus": self.gpus,
                **self._shard(),
            },
            "servers": servers,
            "measurements": measurements,
            "verdicts": self.verdicts,
            "launches": launches,
            "server_failures": self.server_failures,
        }
        redacted: dict[str, Any] = self._redact.json(document)
        return redacted

    def _shard(self) -> dict[str, str]:
        """``{"shard": "K/N"}`` under ``--sglang-shard``: which part of a split suite this is."""
        from pytest_sglang.config.settings import SETTINGS_KEY

        settings = self.config.stash.get(SETTINGS_KEY, None)
        shard = getattr(settings, "shard", None)
        value = getattr(shard, "value", None)
        return {"shard": str(value)} if value is not None else {}

    def write(
        self, *, complete: bool, interrupted: bool = False, exit_status: int | None = None
    ) -> None:
        """Write the JSON report atomically (no-op without ``--sglang-report``).

        A failure is a warning, never an error.
        """
        if self.path is None or self.config.option.collectonly:
            return
        from pytest_sglang.report.writing import write_atomic

        try:
            document = self.document(
                complete=complete, interrupted=interrupted, exit_status=exit_status
            )
            text = json.dumps(document, indent=1, allow_nan=False, default=str) + "\n"
            write_atomic(self.path, text)
        except (OSError, ValueError) as exc:
            self._written = False
            self._problem("the JSON report", self.path, exc)
        else:
            self._written = True

    def _problem(self, what: str, path: Path, exc: BaseException) -> None:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        line = self._redact(f"{what} could not be written to {path}: {cause}")
        if line in self.problems:
            return
        self.problems.append(line)
        # Say it where warnings go as well; under -W error it must not become the error.
        try:
            warnings.warn(SGLangWarning(line), stacklevel=2)
        except Warning:
            pass

    def unique_measurements(self) -> list[MeasurementRow]:
        """Return the measurements, each once (a cached one is recorded by every user)."""
        return unique_measurements(self.measurements)

    def append_markdown(self, *, interrupted: bool) -> None:
        """Append the Markdown summary to ``--sglang-markdown PATH`` (no-op without it).

        Appended, not replaced: ``$GITHUB_STEP_SUMMARY`` collects every step's summary.
        """
        if self.markdown is None or self.config.option.collectonly:
            return
        from pytest_sglang.report.summary import emulated_speedups, render_markdown
        from pytest_sglang.report.writing import write_atomic

        note = "The run was interrupted: these are the results up to then." if interrupted else None
        rows = _table_rows(self.unique_measurements())
        emulated = emulated_speedups(self.servers)
        text = self._redact(render_markdown(rows, self.verdicts, note=note, emulated=emulated))
        try:
            follows = self.markdown.is_file() and self.markdown.stat().st_size > 0
            # A blank line first, so that a previous summary's last block ends there.
            write_atomic(self.markdown, ("\n" if follows else "") + text, append=True)
        except OSError as exc:
            self._problem("the Markdown summary", self.markdown, exc)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the final report and the Markdown summary."""
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self.write(complete=not interrupted, interrupted=interrupted, exit_status=int(exitstatus))
        try:
            self.append_markdown(interrupted=interrupted)
        except Exception as exc:  # rendering: never the reason the run fails
            if self.markdown is not None:
                self._problem("the Markdown summary", self.markdown, exc)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the results tables and verdicts, and any output that could not be written."""
        if self.measurements or self.verdicts:
            from pytest_sglang.report.summary import emulated_speedups, render_tables

            terminalreporter.section("sglang results")
            rows = _table_rows(self.unique_measurements())
            emulated = emulated_speedups(self.servers)
            for line in render_tables(rows, self.verdicts, emulated=emulated):
                terminalreporter.write_line(self._redact(line))
            if self.path is not None and self._written and not self.problems:
                terminalreporter.write_line(f"report written to {self.path}")
        if self.problems:
            terminalreporter.section("sglang output problems", yellow=True)
            for line in self.problems:
                terminalreporter.write_line(f"WARNING: {line}", yellow=True)
