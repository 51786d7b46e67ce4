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
    waits, blocked. Either way an exception raised in the caller's thread by a signal
    handler (pytest-timeout) cancels the run.
    """
    tasks: list[asyncio.Task[T]] = []

    async def tracked() -> T:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        return await coroutine

    def cancel() -> None:
        if tasks and not tasks[0].done():
            # Thread-safe, and it wakes the loop's selector.
            tasks[0].get_loop().call_soon_threadsafe(tasks[0].cancel)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        with ThreadPoolExecutor(1, thread_name_prefix="pytest-sglang-loadgen") as worker:
            future = worker.submit(asyncio.run, tracked())
            try:
                return future.result()
            except BaseException:
                # Raised here (a test timeout, Ctrl-C): the run must not go on without us.
                if not future.done():
                    cancel()
                raise
    handler = signal.getsignal(signal.SIGALRM)
    if threading.current_thread() is not threading.main_thread() or not callable(handler):
        return asyncio.run(coroutine)
    alarm = handler  # narrowed to a callable, for the closure
    raised: list[BaseException] = []

    def on_alarm(signum: int, frame: FrameType | None) -> None:
        try:
            alarm(signum, frame)
        except BaseException as exc:  # pytest-timeout's Failed: end the run, then raise it
            raised.append(exc)
            cancel()

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
