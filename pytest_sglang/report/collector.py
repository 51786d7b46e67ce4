"""The results report: the terminal summary, the JSON file and the Markdown summary.

The JSON goes to ``--sglang-report PATH``, the Markdown to ``--sglang-markdown PATH``; the
tables themselves are rendered by :mod:`pytest_sglang.report.summary`.

Measurements, verdicts and server details travel as ``("sglang", {...})`` entries of each
test's ``user_properties``, which pytest (and pytest-xdist, from its workers) puts on every
test report. The reporter reads them on the controller only, in
``pytest_runtest_logreport``, so it works the same with and without xdist. The JSON is
written atomically (temporary file, then rename) after every test that added something and
at the end, so an interrupted run still leaves a valid report (``complete: false``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from pytest_sglang.report.entries import Entry, MeasurementRow, ServerEntry, VerdictRow

E = TypeVar("E", MeasurementRow, ServerEntry)

__all__ = ["REPORT_VERSION", "SGLangReporter"]

REPORT_VERSION = 1


# platform, tempfile, datetime and the summary (statistics) are imported where they are used:
# this module is loaded by pytest_configure in every run, results or not.


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _dedupe(entries: Sequence[E], key: Callable[[E], str]) -> list[E]:
    seen: dict[str, E] = {}
    for entry in entries:
        seen.setdefault(key(entry), entry)
    return list(seen.values())


class SGLangReporter:
    """Collects the session's results on the controller; prints and writes them."""

    def __init__(
        self, config: pytest.Config, path: Path | None, markdown: Path | None = None
    ) -> None:
        self.config = config
        self.path = path
        self.markdown = markdown
        self.created = ""
        self.measurements: list[MeasurementRow] = []
        self.verdicts: list[VerdictRow] = []
        self.servers: list[ServerEntry] = []
        self.gpus: list[str] = []
        self._consumed: dict[str, int] = {}

    # -- collection -----------------------------------------------------------------------

    @pytest.hookimpl
    def pytest_sessionstart(self) -> None:
        """Note when the session started."""
        self.created = _now()

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Take the ``sglang`` entries this report adds to its test's ``user_properties``."""
        props = [value for name, value in report.user_properties if name == "sglang"]
        start = self._consumed.get(report.nodeid, 0)
        fresh = props[start:]
        if not fresh:
            return
        self._consumed[report.nodeid] = len(props)
        for value in fresh:
            if not isinstance(value, dict):
                continue
            # What a test recorded (report.entries); xdist carried it as plain JSON types.
            entry = cast("Entry", value)
            if entry["record"] == "measurement":
                body = {k: v for k, v in entry.items() if k != "record"}
                self.measurements.append(cast("MeasurementRow", {"test": report.nodeid, **body}))
            elif entry["record"] == "verdict":
                body = {k: v for k, v in entry.items() if k != "record"}
                self.verdicts.append(cast("VerdictRow", {"test": report.nodeid, **body}))
            elif entry["record"] == "server":
                self.servers.append(entry)
            elif entry["record"] == "gpus":
                self.gpus = list(entry["names"])
        self.write(complete=False)

    # -- output ---------------------------------------------------------------------------

    def document(self, *, complete: bool, interrupted: bool = False,
                 exit_status: int | None = None) -> dict[str, Any]:  # fmt: skip
        """Return the report as plain JSON types (see ``schemas/report.schema.json``)."""
        import platform

        from pytest_sglang._version import plugin_version

        measurements = self.unique_measurements()
        servers = _dedupe(self.servers, lambda s: f"{s['name']} {s['url']}")
        versions = sorted({str(s["version"]) for s in servers if s.get("version")})
        return {
            "format": "pytest-sglang-report", "version": REPORT_VERSION,
            "complete": complete, "interrupted": interrupted, "exit_status": exit_status,
            "created": self.created, "updated": _now(),
            "environment": {
                "plugin_version": plugin_version(), "python": sys.version.split()[0],
                "pytest": pytest.__version__, "platform": platform.platform(),
                "sglang_versions": versions, "gpus": self.gpus,
            },
            "servers": servers, "measurements": measurements,
            "verdicts": self.verdicts,
        }  # fmt: skip

    def write(self, *, complete: bool, interrupted: bool = False,
              exit_status: int | None = None) -> None:  # fmt: skip
        """Write the JSON report atomically (no-op without ``--sglang-report``)."""
        if self.path is None or self.config.option.collectonly:
            return
        import tempfile

        document = self.document(complete=complete, interrupted=interrupted,
                                 exit_status=exit_status)  # fmt: skip
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as file:
                json.dump(document, file, indent=1, allow_nan=False, default=str)
                file.write("\n")
            # mkstemp creates 0600; a report is for CI uploaders and colleagues too.
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def unique_measurements(self) -> list[MeasurementRow]:
        """Return the measurements, each once (a cached one is recorded by every user)."""
        return _dedupe(
            self.measurements,
            lambda m: json.dumps([m["server"], m["workload"], m["concurrency"], len(m["runs"])],
                                 sort_keys=True),
        )  # fmt: skip

    def append_markdown(self, *, interrupted: bool) -> None:
        """Append the Markdown summary to ``--sglang-markdown PATH`` (no-op without it).

        Appended, not replaced: ``$GITHUB_STEP_SUMMARY`` collects every step's summary.
        """
        if self.markdown is None or self.config.option.collectonly:
            return
        from pytest_sglang.report.summary import render_markdown

        note = "The run was interrupted: these are the results up to then." if interrupted else None
        text = render_markdown(self.unique_measurements(), self.verdicts, note=note)
        self.markdown.parent.mkdir(parents=True, exist_ok=True)
        follows = self.markdown.is_file() and self.markdown.stat().st_size > 0
        with self.markdown.open("a", encoding="utf-8") as file:
            # A blank line first, so that a previous summary's last block ends there.
            file.write(("\n" if follows else "") + text)

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the final report and the Markdown summary."""
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self.write(complete=not interrupted, interrupted=interrupted, exit_status=int(exitstatus))
        self.append_markdown(interrupted=interrupted)

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the results tables and verdicts."""
        if not self.measurements and not self.verdicts:
            return
        from pytest_sglang.report.summary import render_tables

        terminalreporter.section("sglang results")
        for line in render_tables(self.unique_measurements(), self.verdicts):
            terminalreporter.write_line(line)
        if self.path is not None:
            terminalreporter.write_line(f"report written to {self.path}")
