"""The results report: the terminal summary, the JSON file and the Markdown summary.

Written on the controller from :func:`~pytest_sglang.report.junit.report_entries`, so alike
with and without xdist; the JSON is rewritten atomically after every test, so an interrupted
run leaves a valid report. A failed write is a warning, never the reason a run fails.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.errors import SGLangWarning
from pytest_sglang.report import writing
from pytest_sglang.report.entries import (
    REPORT_FORMAT,
    MeasurementRow,
    ServerEntry,
    VerdictRow,
    as_row,
    unique_measurements,
)
from pytest_sglang.report.junit import report_entries

__all__ = ["REPORT_VERSION", "SGLangReporter"]

REPORT_VERSION = 1

# platform, datetime and the summary (statistics) are imported where they are used: this
# module is loaded by pytest_configure in every run, results or not.


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


@dataclass(eq=False)
class SGLangReporter:
    """Collects the session's results on the controller; prints and writes them."""

    config: pytest.Config
    #: ``--sglang-report`` and ``--sglang-markdown``.
    path: Path | None
    markdown: Path | None = None
    _: KW_ONLY
    redact: Redactor = field(default_factory=Redactor)
    #: The session's launches as plain dicts (the pool's records), read at each write.
    launches: Callable[[], list[dict[str, Any]]] = list
    created: str = ""
    measurements: list[MeasurementRow] = field(default_factory=list)
    verdicts: list[VerdictRow] = field(default_factory=list)
    servers: list[ServerEntry] = field(default_factory=list)
    server_failures: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    #: Outputs that could not be written: one line each (path and cause).
    problems: list[str] = field(default_factory=list)
    written: bool = False

    @pytest.hookimpl
    def pytest_sessionstart(self) -> None:
        """Note when the session started."""
        self.created = _now()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """File the ``sglang`` entries this report adds to its test (``report_entries``)."""
        fresh = report_entries(report)
        rows: dict[str, list[Any]] = {
            "measurement": self.measurements,
            "verdict": self.verdicts,
            "server_failure": self.server_failures,
        }
        for entry in fresh:
            if entry["record"] == "gpus":
                self.gpus = list(entry["names"])
            elif entry["record"] == "server":
                self.servers.append(entry)
            else:
                rows[entry["record"]].append(as_row(entry, report.nodeid))
        if fresh:
            self.write()

    def latest_servers(self) -> list[ServerEntry]:
        """Return each server (by name and URL) once, as its latest entry says it.

        The latest says most: a launched server that died since, for one.
        """
        latest: dict[str, ServerEntry] = {}
        for server in self.servers:
            latest.pop(f"{server['name']} {server['url']}", None)
            latest[f"{server['name']} {server['url']}"] = server
        return list(latest.values())

    def document(self, exit_status: int | None = None) -> dict[str, Any]:
        """Return the report as plain JSON; incomplete while the session runs and if interrupted."""
        import platform

        from pytest_sglang._version import plugin_version
        from pytest_sglang.config.settings import SETTINGS_KEY

        launches = self.launches()
        # A server's launch record is the pool's latest, matched by pid.
        by_pid = {launch.get("pid"): launch for launch in launches if launch.get("pid")}
        servers = [
            cast("ServerEntry", {**s, "launch": by_pid[pid]})
            if (pid := (s.get("launch") or {}).get("pid")) in by_pid
            else s
            for s in self.latest_servers()
        ]
        shard = self.config.stash[SETTINGS_KEY].shard.value
        document = {
            "format": REPORT_FORMAT,
            "version": REPORT_VERSION,
            "complete": exit_status not in (None, pytest.ExitCode.INTERRUPTED),
            "interrupted": exit_status == pytest.ExitCode.INTERRUPTED,
            "exit_status": exit_status,
            "created": self.created,
            "updated": _now(),
            "environment": {
                "plugin_version": plugin_version(),
                "python": sys.version.split()[0],
                "pytest": pytest.__version__,
                "platform": platform.platform(),
                "sglang_versions": sorted({str(s["version"]) for s in servers if s.get("version")}),
                "gpus": self.gpus,
                **({"shard": str(shard)} if shard is not None else {}),
            },
            "servers": servers,
            "measurements": unique_measurements(self.measurements),
            "verdicts": self.verdicts,
            "launches": launches,
            "server_failures": self.server_failures,
        }
        redacted: dict[str, Any] = self.redact.json(document)
        return redacted

    def write(self, exit_status: int | None = None) -> None:
        """Write the JSON report atomically (without ``--sglang-report``, nothing)."""
        if self.path is None or self.config.option.collectonly:
            return
        try:
            document = self.document(exit_status)
            writing.write_atomic(self.path, writing.json_text(document))
        except (OSError, ValueError) as exc:
            self._problem("the JSON report", self.path, exc)
            self.written = False
        else:
            self.written = True

    def _problem(self, what: str, path: Path, exc: BaseException) -> None:
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        line = self.redact(f"{what} could not be written to {path}: {cause}")
        if line not in self.problems:
            self.problems.append(line)
            # Said where warnings go as well; under -W error it must not become the error.
            with contextlib.suppress(Warning):
                warnings.warn(SGLangWarning(line), stacklevel=2)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the final report and append the Markdown summary to ``--sglang-markdown``."""
        self.write(int(exitstatus))
        if self.markdown is None or self.config.option.collectonly:
            return
        from pytest_sglang.report.summary import render_markdown

        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        note = (
            ["_The run was interrupted: these are the results up to then._"] if interrupted else []
        )
        try:
            rows = unique_measurements(self.measurements)
            text = render_markdown(rows, self.verdicts, servers=self.servers, lead=note)
            writing.append_summary(self.markdown, self.redact(text))
        except Exception as exc:  # rendering or writing: never the reason the run fails
            self._problem("the Markdown summary", self.markdown, exc)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the results tables and verdicts, and any output that could not be written."""
        if self.measurements or self.verdicts:
            from pytest_sglang.report.summary import render_tables

            terminalreporter.section("sglang results")
            rows = unique_measurements(self.measurements)
            for line in render_tables(rows, self.verdicts, servers=self.servers):
                terminalreporter.write_line(self.redact(line))
            if self.path is not None and self.written and not self.problems:
                terminalreporter.write_line(f"report written to {self.path}")
        if self.problems:
            terminalreporter.section("sglang output problems", yellow=True)
            for line in self.problems:
                terminalreporter.write_line(f"WARNING: {line}", yellow=True)
