"""Ctrl-C and SIGTERM: an interrupted session keeps what it measured and stops what it started.

CI cancels a job with SIGTERM, which would end pytest on the spot, writing nothing. Here
SIGTERM runs the SIGINT handler (its ``KeyboardInterrupt`` cancels a load run, which keeps
its finished part: ``loadgen/runner.py``); the test it cut short is reported with what it
recorded; what the session started stops before its outputs are written; a second interrupt
kills the session's servers at once (SIGKILL) and raises nothing, so that the teardown still
writes the outputs. A Ctrl-C or SIGTERM during the readiness gate is held and raised between
its steps (``server/probing.held_interrupts``), where nothing can drop it.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Generator
from types import FrameType
from typing import Any, Literal

import pytest

_Handler = Callable[[int, FrameType | None], Any] | int | None
_Phase = Literal["setup", "call", "teardown"]
_Outcome = Literal["passed", "failed"]
_PHASES: tuple[_Phase, ...] = ("setup", "call", "teardown")


class SessionInterrupts:
    """The session's handling of SIGINT and SIGTERM (see the module docstring).

    ``stop`` stops what the session started (never raises), ``hurry`` kills what it launched
    (in a signal handler), ``unreported`` takes the measurements no test has recorded yet.
    """

    def __init__(
        self,
        *,
        stop: Callable[[], None],
        hurry: Callable[[], None],
        unreported: Callable[[], list[tuple[str, object]]],
    ) -> None:
        self._stop, self._hurry, self._unreported = stop, hurry, unreported
        #: The handlers to restore at the end, by signal.
        self._previous: dict[int, _Handler] = {}
        self._ending = self._hurried = False
        #: What interrupted the session first, for the interrupted test's report.
        self._cause = "Ctrl-C (KeyboardInterrupt)"
        #: The phases of the running test that were reported.
        self._reported: set[str] = set()

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
            handler(signal.SIGINT, frame)  # Python's raises KeyboardInterrupt
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
        for signum, previous in self._previous.items():
            if signal.getsignal(signum) in (self._on_sigterm, self._on_again):
                signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _report_interrupted(self, item: pytest.Item) -> None:
        """Send the reports of the phase that was cut (and a teardown's, to close it)."""
        if "sglang_servers" not in getattr(item, "fixturenames", ()):
            return  # not one of ours: pytest's own handling stands
        when = next((phase for phase in _PHASES if phase not in self._reported), None)
        if when is None:
            return  # every phase was reported: the interrupt came after
        item.user_properties.extend(self._unreported())
        message = f"interrupted by {self._cause} during this test's {when}"
        if when == "teardown":
            _send(item, when, "failed", message)
            return
        message += (
            ": it has no verdict; the runs it finished are in the outputs (a cut measurement "
            "says in which run)"
        )
        _send(item, when, "failed", message)
        _send(item, "teardown", "passed", None)  # JUnit writes a test's properties with it


def _send(item: pytest.Item, when: _Phase, outcome: _Outcome, longrepr: str | None) -> None:
    """Send a report of one phase of ``item`` to the reporters, with its ``user_properties``."""
    keywords: dict[str, Literal[1]] = dict.fromkeys(item.keywords, 1)
    report = pytest.TestReport(
        item.nodeid,
        item.location,
        keywords,
        outcome,
        longrepr,
        when,
        user_properties=item.user_properties,
    )
    item.ihook.pytest_runtest_logreport(report=report)
