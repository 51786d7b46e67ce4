"""run_blocking and a test timeout's SIGALRM (pytest-timeout's default method).

pytest-timeout raises its ``Failed`` (a ``BaseException``) from a signal handler. Struck
inside an asyncio callback, asyncio used to swallow it as one connection's "fatal error",
and the run went on past the test's limit (CI, test_ci_timeouts). ``Struck`` stands in for
``Failed`` here; the alarm is made to land inside a callback that keeps the loop busy.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from pytest_sglang.loadgen.runner import run_blocking


class Struck(BaseException):
    """Raised by the alarm, as pytest-timeout's Failed is (not an Exception)."""


def strike(signum: int, frame: FrameType | None) -> None:
    raise Struck("timeout")


@pytest.fixture
def alarm() -> Iterator[None]:
    """A Python SIGALRM handler that raises, set to go off in 0.2 s."""
    previous = signal.signal(signal.SIGALRM, strike)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


async def run_with_a_busy_callback(cancelled: list[bool]) -> str:
    def busy() -> None:  # the alarm goes off in here, inside asyncio's callback handling
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            pass

    asyncio.get_running_loop().call_soon(busy)
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        cancelled.append(True)
        raise
    return "finished"


@pytest.mark.timeout(0)  # this test's own SIGALRM is the subject
def test_an_alarm_inside_an_asyncio_callback_ends_the_run(alarm: None) -> None:
    cancelled: list[bool] = []
    started = time.monotonic()
    with pytest.raises(Struck):
        run_blocking(run_with_a_busy_callback(cancelled))
    assert cancelled, "the run was not cancelled"
    assert time.monotonic() - started < 3  # not the 5 s the run would have taken
    assert signal.getsignal(signal.SIGALRM) is strike  # the handler is given back


@pytest.mark.timeout(0)
def test_an_alarm_while_a_running_loop_waits_for_the_run_cancels_it(alarm: None) -> None:
    cancelled: list[bool] = []

    async def caller() -> str:  # an async test calling the blocking API
        return run_blocking(run_with_a_busy_callback(cancelled))

    started = time.monotonic()
    with pytest.raises(Struck):
        asyncio.run(caller())
    assert cancelled, "the run went on after the caller was interrupted"
    assert time.monotonic() - started < 3


def test_without_an_alarm_the_result_comes_back() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert run_blocking(answer()) == 42
