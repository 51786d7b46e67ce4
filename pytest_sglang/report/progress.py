"""Progress lines during a long launch or measurement, where a CI log shows them live.

On the controller: the terminal reporter, capture suspended and flushed, so a CI log shows
each line when it is written. On an xdist worker: its standard error, prefixed with the
worker's id. A run's own line (:class:`RunLine`) is rewritten in place on a terminal, written
once at its end elsewhere (``docs/ci.md``, "Progress in the CI log").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from _pytest.terminal import TerminalReporter

__all__ = ["RunLine", "progress_writer", "run_line"]


def _uncaptured(config: pytest.Config) -> Callable[[Callable[[], None]], None]:
    """Return a function that calls a write with output capturing suspended around it."""
    capture = config.pluginmanager.get_plugin("capturemanager")

    def uncaptured(write: Callable[[], None]) -> None:
        if capture is not None:
            with capture.global_and_fixture_disabled():
                write()
        else:
            write()

    return uncaptured


def progress_writer(config: pytest.Config) -> Callable[[str], None]:
    """Return a function that shows one progress line live, past output capturing."""
    workerinput = getattr(config, "workerinput", None)
    uncaptured = _uncaptured(config)

    if workerinput is not None:
        prefix = f"[{workerinput.get('workerid', 'worker')}] "

        def to_stderr(line: str) -> None:
            # A line of its own: the controller's terminal may be mid-line ("test_x.py ..").
            data = ("\n" + prefix + line + "\n").encode("utf-8", "replace")
            # Straight to the file descriptor: sys.stderr may be a capture's replacement.
            uncaptured(lambda: _write_all(2, data))

        return to_stderr

    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def to_terminal(line: str) -> None:
        if reporter is None:
            return

        def write() -> None:
            reporter.write_line(line)
            reporter.flush()

        uncaptured(write)

    return to_terminal


class RunLine:
    """One measured run's progress line: rewritten in place on a terminal, else its end.

    ``show`` is called with the run's line about once a second (the load generator's
    progress ticker reads its counters; nothing is written per request), ``end`` once with
    its final figures. ``reporter`` is pytest's terminal reporter (``None``: say nothing).
    """

    def __init__(
        self,
        reporter: TerminalReporter | None,
        uncaptured: Callable[[Callable[[], None]], None],
        *,
        quiet: bool = False,
    ) -> None:
        self._reporter = reporter
        #: ``-q``: no progress at all, the measurement's occasional lines neither.
        self.quiet = quiet
        self._uncaptured = uncaptured
        #: Whether the line is rewritten in place (a terminal): no occasional lines needed.
        self.in_place = reporter is not None and bool(reporter.isatty())
        #: A run's line is on the terminal and not finished: rewrite it, no new line.
        self._open = False

    def show(self, line: str) -> None:
        """Show the run's line so far (on a terminal; elsewhere nothing)."""
        if self.in_place:
            self._rewrite(line)

    def end(self, line: str) -> None:
        """Leave the run's last line: rewritten in place, or written once."""
        reporter = self._reporter
        if reporter is None:
            return
        if self.in_place:
            self._rewrite(line)
            self._open = False
            return

        def write() -> None:
            reporter.write_line(line)
            reporter.flush()

        self._uncaptured(write)

    def _rewrite(self, line: str) -> None:
        reporter = self._reporter
        assert reporter is not None

        def write() -> None:
            # A run's first line leaves the one pytest is writing ("test_x.py ."); pytest's
            # own marker for "this line is taken" (-2) makes its next output start a new one.
            if not self._open:
                reporter.ensure_newline()
                self._open = True
            reporter.rewrite(line, erase=True)
            reporter.currentfspath = -2
            reporter.flush()

        self._uncaptured(write)


def run_line(config: pytest.Config) -> RunLine:
    """Return the session's :class:`RunLine`: silent under ``-q`` and on xdist workers."""
    reporter: TerminalReporter | None = config.pluginmanager.get_plugin("terminalreporter")
    quiet = config.get_verbosity() < 0
    if quiet or getattr(config, "workerinput", None) is not None:
        reporter = None
    return RunLine(reporter, _uncaptured(config), quiet=quiet)


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:  # a closed standard error must not fail the test
        pass
