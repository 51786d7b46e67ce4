"""Progress reporting, and the periodic tasks of a run (progress, the client's own load).

The runner counts into a :class:`Tally` and a ticker reads it once per interval, so the
callback's cost does not grow with the token rate.
"""

from __future__ import annotations

import asyncio
import time
import warnings
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "ClientLoad",
    "ClientMonitor",
    "GuardedProgress",
    "Periodic",
    "ProgressCallback",
    "ProgressTicker",
    "Tally",
    "no_progress",
]


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


class GuardedProgress:
    """A progress callback that turns itself off, with a warning, the first time it raises.

    A display bug must not lose a run (in one process or summed over workers).
    """

    def __init__(self, callback: ProgressCallback | None) -> None:
        #: The callback; ``None`` when there is none, or once it raised.
        self.callback = None if callback is no_progress else callback

    def __call__(self, done: int, total: int, output_tokens: int, elapsed: float) -> None:
        """Report progress, unless the callback is off."""
        if self.callback is None:
            return
        try:
            self.callback(done, total, output_tokens, elapsed)
        except Exception as exc:
            self.callback = None
            warnings.warn(
                f"the progress callback raised {exc!r}; progress reporting is off for this run",
                RuntimeWarning,
                stacklevel=1,
            )


class ProgressTicker(Periodic):
    """Calls a :class:`ProgressCallback` every ``interval`` seconds, and once at the end."""

    def __init__(
        self, callback: ProgressCallback, tally: Tally, started: float, interval: float = 1.0
    ) -> None:
        self._report = GuardedProgress(callback)
        self.interval = None if self._report.callback is None else interval
        self._tally, self._started = tally, started

    async def stop(self) -> None:
        """Stop ticking and report the final counts."""
        await self.halt()
        self.tick(0.0)

    def tick(self, late: float) -> None:
        """Report the counts so far."""
        t = self._tally
        self._report(t.done, t.total, t.tokens, time.perf_counter() - self._started)


@dataclass(frozen=True)
class ClientLoad:
    """The client's own load during a run's measured phase."""

    #: Seconds of CPU the whole client process used (every thread).
    cpu_seconds: float
    #: Wall-clock seconds of the measured phase.
    wall_seconds: float
    #: The event loop's lateness, in seconds, over ``samples`` wake-ups.
    lag_p50: float
    lag_p99: float
    lag_max: float
    samples: int

    @property
    def cpu_fraction(self) -> float:
        """CPU seconds per wall second: 1.0 is one core fully busy."""
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds > 0 else 0.0


class ClientMonitor(Periodic):
    """Measures the client's CPU and loop lag between :meth:`start` and :meth:`stop`.

    A load generator that cannot keep up measures itself: how late a sleeping task wakes
    (the loop's lag) and the process's CPU time over the measured phase, at almost no cost;
    the verdict is the ``client_bound`` check (``docs/metrics.md``, "Client saturation").
    """

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self._lags: list[float] = []

    def start(self) -> None:
        """Begin watching (call from the event loop that runs the requests)."""
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        super().start()

    def tick(self, late: float) -> None:
        """Note how late the loop woke the task."""
        self._lags.append(max(0.0, late))

    async def stop(self) -> ClientLoad:
        """Stop watching and return what was seen."""
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        await self.halt()
        lags = sorted(self._lags) or [0.0]
        p50, p99 = (lags[int(q * (len(lags) - 1) + 0.5)] for q in (0.5, 0.99))  # nearest rank
        return ClientLoad(cpu, wall, p50, p99, lags[-1], len(self._lags))
