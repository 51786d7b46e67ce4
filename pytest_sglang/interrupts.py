"""Ctrl-C and SIGTERM: an interrupted session keeps what it measured and stops what it started.

A user stops a run with Ctrl-C (SIGINT); CI cancels a job with SIGTERM (GitHub Actions,
GitLab, Jenkins, Kubernetes before its SIGKILL). Python turns only SIGINT into
``KeyboardInterrupt``: a SIGTERM would end pytest on the spot, writing nothing, leaving the
servers to their reapers. :class:`SessionInterrupts` makes the two one for the session:

* **SIGTERM is Ctrl-C.** Its handler, installed when the session starts (main thread only;
  the previous one is restored at the end), runs the current SIGINT handler: asyncio's
  while a load run goes on (it cancels the run, whose finished part is kept), Python's
  otherwise (``KeyboardInterrupt``). No signal is passed on to any process.
* **The interrupted test reports.** pytest makes no report for a test phase that
  ``KeyboardInterrupt`` cut short, so what the test had recorded (the runs it finished, the
  cut measurement) never reached the reporters. For a test that used the plugin's servers,
  a failed report of that phase, saying it was interrupted, carries its evidence to the JSON
  report, the Markdown, JUnit and the saved baseline (as pytest-xdist reports the test a
  crashed worker was running), with the measurements taken for tests that never ran
  (declared ones: ``Bench.take_unreported``).
* **What the session started stops before its outputs are written**, so that each launch
  is recorded as stopped, with its stop time.
* **A second Ctrl-C (or SIGTERM) hurries, quietly.** From the first interrupt (and from the
  session's end) until the end of pytest, SIGINT and SIGTERM raise nothing: a
  ``KeyboardInterrupt`` in a teardown would skip the rest of it and end in a traceback.
  They kill what the session launched at once instead (SIGKILL, no grace period), and the
  session ends as soon as its outputs are written.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any

import pytest

__all__ = ["SessionInterrupts"]

_Handler = Callable[[int, FrameType | None], Any] | int | None
_PHASES = ("setup", "call", "teardown")


class SessionInterrupts:
    """The session's handling of SIGINT and SIGTERM (see the module docstring)."""

    def __init__(
        self,
        *,
        stop: Callable[[], None],
        hurry: Callable[[], None],
        unreported: Callable[[], list[tuple[str, object]]],
    ) -> None:
        #: Stops what the session started (idempotent, never raises).
        self._stop = stop
        #: Kills what the session launched at once; called in a signal handler.
        self._hurry = hurry
        #: Takes the ``user_properties`` of measurements no test has recorded yet.
        self._unreported = unreported
        #: The handlers to restore at the end, by signal.
        self._previous: dict[int, _Handler] = {}
        #: Whether the session knows it is ending (interrupted, or finishing).
        self._ending = False
        self._hurried = False
        #: What interrupted the session first, for the interrupted test's report.
        self._cause = "Ctrl-C (KeyboardInterrupt)"
        #: The phases of the running test that were reported.
        self._reported: set[str] = set()

    # -- signals ----------------------------------------------------------------------------

    def _install(self, signum: int, handler: Callable[[int, FrameType | None], None]) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may set handlers (and receives the signals)
        previous = signal.signal(signum, handler)
        self._previous.setdefault(signum, previous)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """Handle the first SIGTERM as Ctrl-C."""
        self._cause = "SIGTERM (handled as Ctrl-C: KeyboardInterrupt)"
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)  # asyncio's cancels the run; Python's raises
            return
        raise KeyboardInterrupt

    def _on_again(self, signum: int, frame: FrameType | None) -> None:
        """Hurry an ending session: kill what it launched now, raise nothing."""
        if not self._hurried:
            self._hurried = True
            name = signal.Signals(signum).name
            print(  # noqa: T201
                f"\nsglang: interrupted again ({name}): killing the servers this session "
                "launched now (SIGKILL, no grace period), then writing its outputs",
                file=sys.stderr,
            )
        self._hurry()

    def _ending_now(self) -> None:
        """From here on, SIGINT and SIGTERM hurry the end instead of raising."""
        if self._ending:
            return
        self._ending = True
        self._install(signal.SIGINT, self._on_again)
        self._install(signal.SIGTERM, self._on_again)

    # -- hooks ------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self) -> None:
        """Handle SIGTERM as Ctrl-C for the session."""
        self._install(signal.SIGTERM, self._on_sigterm)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        """Report the test an interrupt cut short, with what it had measured."""
        self._reported = set()
        try:
            return (yield)
        except KeyboardInterrupt:
            self._ending_now()
            try:
                self._report_interrupted(item)
            except Exception as exc:  # never in the way of the interrupt itself
                print(f"sglang: reporting the interrupted test: {exc}", file=sys.stderr)  # noqa: T201
            raise

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Note which phases of the running test were reported."""
        self._reported.add(report.when)

    @pytest.hookimpl
    def pytest_keyboard_interrupt(self) -> None:
        """End the session the same way after an interrupt outside a test (collection)."""
        self._ending_now()

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, exitstatus: int) -> None:
        """Stop what an interrupted session started before its outputs are written."""
        self._ending_now()
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            self._stop()

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self) -> None:
        """Give the signals back their handlers (after the last server was stopped)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) in (self._on_sigterm, self._on_again):
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    # -- the interrupted test ---------------------------------------------------------------

    def _report_interrupted(self, item: pytest.Item) -> None:
        """Send the reports of the phase that was cut (and a teardown's, to close it)."""
        if "sglang_servers" not in getattr(item, "fixturenames", ()):
            return  # not one of ours: pytest's own handling stands
        when = next((phase for phase in _PHASES if phase not in self._reported), None)
        if when is None:
            return  # every phase was reported: the interrupt came after
        item.user_properties.extend(self._unreported())
        message = f"interrupted by {self._cause} during this test's {when}"
        if when != "teardown":
            message += (
                ": it has no verdict; the runs it finished are in the outputs (a cut "
                "measurement says in which run)"
            )
        reports: list[tuple[str, str, str | None]] = [(when, "failed", message)]
        if when != "teardown":  # JUnit writes a test's properties with its teardown
            reports.append(("teardown", "passed", None))
        keywords = {name: 1 for name in item.keywords}
        for phase, outcome, longrepr in reports:
            report = pytest.TestReport(
                item.nodeid, item.location, keywords, outcome, longrepr, phase,  # type: ignore[arg-type]
                user_properties=item.user_properties,
            )  # fmt: skip
            item.ihook.pytest_runtest_logreport(report=report)
