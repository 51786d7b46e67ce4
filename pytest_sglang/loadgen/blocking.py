"""Running the load generator's coroutines from blocking code, interruptible by a test timeout.

pytest-timeout raises from a ``SIGALRM`` handler in whatever frame runs; inside one of
asyncio's callbacks that exception is swallowed and logged, and the run goes on past the
test's limit. :func:`run_blocking` does for ``SIGALRM`` what asyncio does for Ctrl-C: the
handler's exception cancels the run (whose finished part is kept) and is raised once the
loop has stopped.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import FrameType
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a new event loop and return its result.

    From a thread already running an event loop (an ``async def`` test calling
    ``sglang_bench``) it runs on its own loop in a worker thread while the caller's loop
    waits, blocked (await the async API to keep it running). Either way an exception raised
    in the caller's thread by a signal handler (pytest-timeout) cancels the run.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coroutine)
    return _run_on_a_thread(coroutine)


def _run_here(coroutine: Coroutine[Any, Any, T]) -> T:
    handler = signal.getsignal(signal.SIGALRM)
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        return asyncio.run(coroutine)
    alarm = handler  # narrowed to a callable, for the closure
    raised: list[BaseException] = []
    main: list[asyncio.Task[T]] = []

    async def tracked() -> T:
        task = asyncio.current_task()
        assert task is not None
        main.append(task)
        return await coroutine

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        try:
            alarm(signum, frame)
        except BaseException as exc:  # pytest-timeout's Failed: end the run, then raise it
            raised.append(exc)
            if main and not main[0].done():
                main[0].cancel()
                main[0].get_loop().call_soon_threadsafe(lambda: None)  # wake the selector

    signal.signal(signal.SIGALRM, on_alarm)
    try:
        result = asyncio.run(tracked())
    except BaseException:
        if raised:  # the cancellation it caused, or what the run raised on the way out
            raise raised[0] from None
        raise
    finally:
        # pytest-timeout may have set its own handler since (a timer re-armed): keep that.
        if signal.getsignal(signal.SIGALRM) is on_alarm:
            signal.signal(signal.SIGALRM, handler)
    if raised:  # it struck before the run began, where there was nothing to cancel
        raise raised[0]
    return result


def _run_on_a_thread(coroutine: Coroutine[Any, Any, T]) -> T:
    loops: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[T]]] = []

    async def tracked() -> T:
        task = asyncio.current_task()
        assert task is not None
        loops.append((asyncio.get_running_loop(), task))
        return await coroutine

    with ThreadPoolExecutor(1, thread_name_prefix="pytest-sglang-loadgen") as worker:
        future = worker.submit(asyncio.run, tracked())
        try:
            return future.result()
        except BaseException:
            # Raised here (a test timeout, Ctrl-C): the run must not go on without us.
            if loops and not future.done():
                loop, task = loops[0]
                loop.call_soon_threadsafe(task.cancel)
            raise
