"""Progress lines during a long launch or measurement, shown live past output capturing.

On an xdist worker they go to its standard error, prefixed with its id; a run's own line is
rewritten in place on a terminal (``docs/ci.md``, "Progress in the CI log").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

import pytest
from pytest import TerminalReporter

__all__ = ["RunLine", "progress_writer", "run_line"]


def _uncaptured(config: pytest.Config) -> Callable[[], contextlib.AbstractContextManager[None]]:
    """Return a context in which output capturing is suspended (nothing without capturing)."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    return contextlib.nullcontext if capture is None else capture.global_and_fixture_disabled


def progress_writer(config: pytest.Config) -> Callable[[str], None]:
    """Return a function that shows one progress line live, past output capturing."""
    workerinput = getattr(config, "workerinput", None)
    uncaptured = _uncaptured(config)
    if workerinput is None:
        return RunLine(config.pluginmanager.get_plugin("terminalreporter"), uncaptured).write
    worker = workerinput.get("workerid", "worker")

    def show(line: str) -> None:
        # Its own line (the controller's may be mid-line), straight to the descriptor:
        # sys.stderr may be a capture's replacement; a closed one must not fail the test.
        with uncaptured(), contextlib.suppress(OSError), open(2, "wb", closefd=False) as stderr:
            stderr.write(f"\n[{worker}] {line}\n".encode(errors="replace"))

    return show


@dataclass
class RunLine:
    """One measured run's progress line: rewritten in place on a terminal, else its end.

    ``show`` is called about once a second (the load generator's ticker), ``end`` once with
    the final figures; without a ``reporter`` (``-q``, xdist workers) nothing is shown.
    """

    _reporter: TerminalReporter | None
    #: Suspends output capturing around a write (``_uncaptured``).
    _uncaptured: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
    _: KW_ONLY
    #: ``-q``: no progress at all, the measurement's occasional lines neither.
    quiet: bool = False
    #: Whether a run's line is on the terminal and not finished (rewritten, no new line).
    _open: bool = field(default=False, init=False)

    @property
    def in_place(self) -> bool:
        """Whether the line is rewritten in place (a terminal): no occasional lines needed."""
        return self._reporter is not None and bool(self._reporter.isatty())

    def show(self, line: str) -> None:
        """Show the run's line so far (on a terminal; elsewhere nothing)."""
        reporter = self._reporter
        if reporter is None or not reporter.isatty():
            return
        with self._uncaptured():
            # A run's first line leaves the one pytest is writing ("test_x.py ."); pytest's
            # own marker for "this line is taken" (-2) makes its next output start a new one.
            if not self._open:
                reporter.ensure_newline()
                self._open = True
            reporter.rewrite(line, erase=True)
            reporter.currentfspath = -2
            reporter.flush()

    def end(self, line: str) -> None:
        """Leave the run's last line: rewritten in place, or written once."""
        if self.in_place:
            self.show(line)
            self._open = False
        else:
            self.write(line)

    def write(self, line: str) -> None:
        """Write ``line`` once on its own line, flushed so that a CI log shows it now."""
        if self._reporter is not None:
            with self._uncaptured():
                self._reporter.write_line(line)
                self._reporter.flush()


def run_line(config: pytest.Config) -> RunLine:
    """Return the session's :class:`RunLine`: silent under ``-q`` and on xdist workers."""
    reporter: TerminalReporter | None = config.pluginmanager.get_plugin("terminalreporter")
    quiet = config.get_verbosity() < 0
    if quiet or getattr(config, "workerinput", None) is not None:
        reporter = None
    return RunLine(reporter, _uncaptured(config), quiet=quiet)
