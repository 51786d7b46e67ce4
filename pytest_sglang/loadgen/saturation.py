"""Is the client the bottleneck? The load generator's own CPU and event-loop lag per run.

A load generator that cannot keep up measures itself. A :class:`ClientMonitor` records, at
almost no cost, how late a sleeping task wakes (the loop's lag) and the process's CPU time
over the measured phase; the verdict is the ``client_bound`` check
(:mod:`pytest_sglang.measure.checks`, ``docs/metrics.md``, "Client saturation").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pytest_sglang.loadgen.progress import Periodic

__all__ = ["ClientLoad", "ClientMonitor"]


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
    """Measures the client's CPU and loop lag between :meth:`start` and :meth:`stop`."""

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
