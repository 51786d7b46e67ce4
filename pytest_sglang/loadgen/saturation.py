"""Is the client the bottleneck? The load generator's own CPU and event-loop lag per run.

A load generator that cannot keep up measures itself. A :class:`ClientMonitor` records, at
almost no cost, how late a sleeping task wakes (the loop's lag) and the process's CPU time
over the measured phase; the verdict is the ``client_bound`` check
(:mod:`pytest_sglang.measure.checks`, ``docs/metrics.md``, "Client saturation").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["ClientLoad", "ClientMonitor"]

#: How often the monitor wakes (seconds).
DEFAULT_INTERVAL = 0.05


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

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types."""
        return {
            "cpu_seconds": self.cpu_seconds,
            "wall_seconds": self.wall_seconds,
            "cpu_fraction": self.cpu_fraction,
            "lag_p50": self.lag_p50,
            "lag_p99": self.lag_p99,
            "lag_max": self.lag_max,
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClientLoad:
        """Rebuild from :meth:`as_dict` output."""
        return cls(**{f.name: data[f.name] for f in fields(cls)})


class ClientMonitor:
    """Measures the client's CPU and loop lag between :meth:`start` and :meth:`stop`."""

    def __init__(self, interval: float = DEFAULT_INTERVAL) -> None:
        self.interval = interval
        self._lags: list[float] = []
        self._task: asyncio.Task[None] | None = None
        self._cpu0 = 0.0
        self._wall0 = 0.0

    async def _watch(self) -> None:
        while True:
            due = time.perf_counter() + self.interval
            await asyncio.sleep(self.interval)
            self._lags.append(max(0.0, time.perf_counter() - due))

    def start(self) -> None:
        """Begin watching (call from the event loop that runs the requests)."""
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.create_task(self._watch())

    async def stop(self) -> ClientLoad:
        """Stop watching and return what was seen."""
        wall = time.perf_counter() - self._wall0
        cpu = time.process_time() - self._cpu0
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        lags = sorted(self._lags) or [0.0]

        def at(q: float) -> float:
            return lags[min(len(lags) - 1, int(q * (len(lags) - 1) + 0.5))]

        return ClientLoad(cpu, wall, at(0.5), at(0.99), lags[-1], len(self._lags))
