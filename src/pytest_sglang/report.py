"""The results report: a terminal table, and the JSON file of ``--sglang-report PATH``.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["REPORT_VERSION", "SGLangReporter", "render_tables"]

REPORT_VERSION = 1


# platform, statistics, tempfile and datetime are imported where they are used: this module
# is loaded by pytest_configure in every run, results or not.


def _now() -> str:
    import datetime

    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")


def _median(values: list[float]) -> float | None:
    import statistics

    return statistics.median(values) if values else None


def _run_stat(runs: list[dict[str, Any]], metric: str, stat: str | None = None) -> float | None:
    values = []
    for run in runs:
        value = run.get(metric)
        if stat is not None:
            value = value.get(stat) if isinstance(value, dict) else None
        if isinstance(value, (int, float)):
            values.append(float(value))
    return _median(values)


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def render_tables(measurements: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> list[str]:
    """Return the terminal summary: one table per workload, then the verdicts."""
    lines: list[str] = []
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for entry in measurements:
        key = json.dumps(entry["workload"], sort_keys=True)
        by_workload.setdefault(key, []).append(entry)
    header = (f"{'server':<14} {'C':>5} {'runs':>4} {'out tok/s':>10} {'TTFT p50':>9} "
              f"{'TTFT p99':>9} {'ITL p50':>8} {'accept':>7} {'errors':>6}")  # fmt: skip
    for key, entries in by_workload.items():
        workload = json.loads(key)
        lines.append(
            f"workload: {workload['endpoint']}, input {workload['input_len']}, output "
            f"{workload['output_len']} tokens, {workload['requests']} requests"
            + (f" (or {workload['requests_per_slot']} per slot)"
               if workload.get("requests_per_slot") else "")
            + "; medians over runs, times in ms"
        )  # fmt: skip
        lines.append(header)
        for entry in sorted(entries, key=lambda e: (e["concurrency"], e["server"])):
            runs = entry["runs"]
            lines.append(
                f"{entry['server']:<14} {entry['concurrency']:>5} {len(runs):>4} "
                f"{_fmt(_run_stat(runs, 'output_throughput')):>10} "
                f"{_fmt(_run_stat(runs, 'ttft', 'p50'), 1000):>9} "
                f"{_fmt(_run_stat(runs, 'ttft', 'p99'), 1000):>9} "
                f"{_fmt(_run_stat(runs, 'itl', 'p50'), 1000, 2):>8} "
                f"{_fmt(_run_stat(runs, 'acceptance_length'), digits=2):>7} "
                f"{sum(int(r.get('failed', 0)) for r in runs):>6}"
            )
        lines.append("")
    for verdict in verdicts:
        # A crossover is a finding, not a pass or a fail: its assertions come separately.
        tag = "CROSSOVER" if verdict["kind"] == "find_crossover" else verdict["outcome"].upper()
        lines.append(f"[{tag}] {verdict['test']}: {verdict['summary']}")
        if verdict["kind"] == "find_crossover":
            table = verdict.get("table")
            if table:
                lines += [f"    {line}" for line in table.splitlines()]
        lines += [f"    warning: {w}" for w in verdict.get("warnings", [])]
    return lines


def _dedupe(
    entries: list[dict[str, Any]], key: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    for entry in entries:
        seen.setdefault(key(entry), entry)
    return list(seen.values())


class SGLangReporter:
    """Collects the session's results on the controller; prints and writes them."""

    def __init__(self, config: pytest.Config, path: Path | None) -> None:
        self.config = config
        self.path = path
        self.created = ""
        self.measurements: list[dict[str, Any]] = []
        self.verdicts: list[dict[str, Any]] = []
        self.servers: list[dict[str, Any]] = []
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
        for entry in fresh:
            if not isinstance(entry, dict):
                continue
            kind = entry.get("record")
            body = {k: v for k, v in entry.items() if k != "record"}
            if kind == "measurement":
                self.measurements.append({"test": report.nodeid, **body})
            elif kind == "verdict":
                self.verdicts.append({"test": report.nodeid, **body})
            elif kind == "server":
                self.servers.append(body)
            elif kind == "gpus":
                self.gpus = list(body.get("names", []))
        self.write(complete=False)

    # -- output ---------------------------------------------------------------------------

    def document(self, *, complete: bool, interrupted: bool = False,
                 exit_status: int | None = None) -> dict[str, Any]:  # fmt: skip
        """Return the report as plain JSON types (see ``schemas/report.schema.json``)."""
        import platform

        from pytest_sglang import __version__

        measurements = _dedupe(
            self.measurements,
            lambda m: json.dumps([m["server"], m["workload"], m["concurrency"], len(m["runs"])],
                                 sort_keys=True),
        )  # fmt: skip
        servers = _dedupe(self.servers, lambda s: f"{s['name']} {s['url']}")
        versions = sorted({str(s["version"]) for s in servers if s.get("version")})
        return {
            "format": "pytest-sglang-report", "version": REPORT_VERSION,
            "complete": complete, "interrupted": interrupted, "exit_status": exit_status,
            "created": self.created, "updated": _now(),
            "environment": {
                "plugin_version": __version__, "python": sys.version.split()[0],
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

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        """Write the final report."""
        interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        self.write(complete=not interrupted, interrupted=interrupted, exit_status=int(exitstatus))

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the results tables and verdicts."""
        if not self.measurements and not self.verdicts:
            return
        terminalreporter.section("sglang results")
        measurements = _dedupe(
            self.measurements,
            lambda m: json.dumps([m["server"], m["workload"], m["concurrency"], len(m["runs"])],
                                 sort_keys=True),
        )  # fmt: skip
        for line in render_tables(measurements, self.verdicts):
            terminalreporter.write_line(line)
        if self.path is not None:
            terminalreporter.write_line(f"report written to {self.path}")
