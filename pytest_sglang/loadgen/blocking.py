"""Running the load generator's coroutines from blocking code, interruptible by a test timeout.

pytest-timeout raises from a ``SIGALRM`` handler in whatever frame runs; inside one of
asyncio's callbacks that exception is swallowed and logged, and the run would go on past the
test's limit. :func:`run_blocking` therefore runs the coroutine on its own event loop in a
worker thread while the caller's thread only waits: there a signal handler's exception (or
Ctrl-C) cancels the run, waits for it to end (its finished part is kept), and propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a new event loop and return its result.

    Callable from a thread already running an event loop (an ``async def`` test calling
    ``sglang_bench``), whose loop waits, blocked (await the async API to keep it running).
    """
    tasks: list[asyncio.Task[T]] = []
    interrupted: list[bool] = []

    async def tracked() -> T:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        if interrupted:  # struck before the run began
            coroutine.close()
            raise asyncio.CancelledError
        return await coroutine

    with ThreadPoolExecutor(1, thread_name_prefix="pytest-sglang-loadgen") as worker:
        future = worker.submit(asyncio.run, tracked())
        try:
            return future.result()
        except BaseException:
            # Raised here (a test timeout, Ctrl-C): the run must not go on without us.
            interrupted.append(True)
            if tasks and not future.done():
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    tasks[0].get_loop().call_soon_threadsafe(tasks[0].cancel)
            raise
