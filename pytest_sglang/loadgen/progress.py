"""Progress reporting: a callback the runner calls at most every ``interval`` seconds.

The runner counts into a :class:`Tally` (cheap on the hot path) and a ticker task reads it
once per interval, so the callback's cost does not grow with the token rate.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from typing import Protocol

__all__ = ["ProgressCallback", "ProgressTicker", "Tally", "no_progress"]


class ProgressCallback(Protocol):
    """Called with the requests finished and tokens received so far in the current run.

    :param done: requests finished (completed or failed), warm-up included.
    :param total: requests the run sends, warm-up included.
    :param output_tokens: generated tokens received so far, warm-up included.
    :param elapsed: seconds since the run started.
    """

    def __call__(self, done: int, total: int, output_tokens: int, elapsed: float) -> None:
        """Report progress."""


def no_progress(done: int, total: int, output_tokens: int, elapsed: float) -> None:
    """Report nothing (the default callback)."""


class Tally:
    """Counters the runner and the stream parsers update while a run goes on."""

    __slots__ = ("done", "tokens", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.tokens = 0


class ProgressTicker:
    """Calls a :class:`ProgressCallback` every ``interval`` seconds, and once at the end.

    A callback that raises is disabled with a warning: a display bug must not lose a run's
    records.
    """

    def __init__(
        self, callback: ProgressCallback, tally: Tally, started: float, interval: float = 1.0
    ) -> None:
        self._callback: ProgressCallback | None = None if callback is no_progress else callback
        self._tally = tally
        self._started = started
        self._interval = interval
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start ticking (does nothing for :func:`no_progress`)."""
        if self._callback is not None:
            self._task = asyncio.get_running_loop().create_task(self._tick())

    async def stop(self) -> None:
        """Stop ticking and report the final counts."""
        if self._task is not None:
            self._task.cancel()
            # gather returns the ticker's CancelledError as a value, while a cancellation
            # of the caller itself still propagates.
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._report()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self._report()

    def _report(self) -> None:
        if self._callback is None:
            return
        tally = self._tally
        try:
            self._callback(
                tally.done, tally.total, tally.tokens, time.perf_counter() - self._started
            )
        except Exception as exc:
            self._callback = None
            warnings.warn(
                f"the progress callback raised {exc!r}; progress reporting is off for this run",
                RuntimeWarning,
                stacklevel=1,
            )
