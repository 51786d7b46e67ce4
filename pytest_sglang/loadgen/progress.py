"""Progress reporting, and the periodic tasks of a run.

The runner counts into a :class:`Tally` and a ticker reads it once per interval, so the
callback's cost does not grow with the token rate.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Periodic", "ProgressCallback", "ProgressTicker", "Tally", "no_progress"]


class ProgressCallback(Protocol):
    """Called with the requests done of ``total``, the tokens so far, and seconds elapsed.

    The counts include the warm-up requests.
    """

    def __call__(self, done: int, total: int, output_tokens: int, elapsed: float) -> None:
        """Report progress."""


def no_progress(done: int, total: int, output_tokens: int, elapsed: float) -> None:
    """Report nothing (the default callback)."""


@dataclass(slots=True)
class Tally:
    """Counters the runner and the stream parsers update while a run goes on."""

    total: int
    done: int = 0
    tokens: int = 0


class Periodic:
    """A task calling :meth:`tick` every :attr:`interval` seconds (``None``: never)."""

    interval: float | None = None
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start ticking (call from the event loop that runs the requests)."""
        if self.interval is not None:
            self._task = asyncio.get_running_loop().create_task(self._loop(self.interval))

    async def halt(self) -> None:
        """Stop ticking."""
        if self._task is not None:
            self._task.cancel()
            # gather returns the task's CancelledError as a value; a cancellation of the
            # caller itself still propagates.
            await asyncio.gather(self._task, return_exceptions=True)

    async def _loop(self, interval: float) -> None:
        while True:
            due = time.perf_counter() + interval
            await asyncio.sleep(interval)
            self.tick(time.perf_counter() - due)

    def tick(self, late: float) -> None:
        """Do the periodic work (``late``: how late the task woke, the event loop's lag)."""


class ProgressTicker(Periodic):
    """Calls a :class:`ProgressCallback` every ``interval`` seconds, and once at the end.

    A callback that raises is disabled with a warning: a display bug must not lose a run.
    """

    def __init__(
        self, callback: ProgressCallback, tally: Tally, started: float, interval: float = 1.0
    ) -> None:
        self._callback = None if callback is no_progress else callback
        self.interval = None if self._callback is None else interval
        self._tally, self._started = tally, started

    async def stop(self) -> None:
        """Stop ticking and report the final counts."""
        await self.halt()
        self.tick(0.0)

    def tick(self, late: float) -> None:
        """Report the counts so far."""
        if self._callback is None:
            return
        t = self._tally
        try:
            self._callback(t.done, t.total, t.tokens, time.perf_counter() - self._started)
        except Exception as exc:
            self._callback = None
            warnings.warn(
                f"the progress callback raised {exc!r}; progress reporting is off for this run",
                RuntimeWarning,
                stacklevel=1,
            )
