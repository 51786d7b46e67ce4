"""What the GPUs did during a run: telemetry sampled on a thread, energy per token, throttling."""

from __future__ import annotations

import contextlib
import itertools
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.errors import GpuUnavailable
from pytest_sglang.gpu.model import Gpu, GpuSnapshot
from pytest_sglang.gpu.probes import GpuProbe

__all__ = ["TelemetrySampler"]


@dataclass
class TelemetrySampler:
    """Snapshots ``uuids`` on a thread between :meth:`start` and :meth:`stop`.

    ``uuids`` None: every GPU the probe shows (an attached server's host).

    A compute process not there at the start nor in ``allowed_pids`` counts as foreign.
    """

    probe: GpuProbe
    uuids: Sequence[str] | None = None
    interval: float = 0.5
    allowed_pids: frozenset[int] = frozenset()
    snapshots: list[GpuSnapshot] = field(default_factory=list)
    #: When sampling began and ended (``time.monotonic()``).
    started_at: float = 0.0
    stopped_at: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread = field(init=False, repr=False)  # made by :meth:`start`

    def _read(self) -> None:
        with contextlib.suppress(GpuUnavailable):  # a sample lost, never a crash mid-run
            snapshot = self.probe.snapshot()
            self.snapshots.append(snapshot if self.uuids is None else snapshot.only(self.uuids))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def start(self) -> None:
        """Take the first snapshot now and keep sampling on a daemon thread."""
        self.started_at = time.monotonic()
        self._read()
        self._thread = threading.Thread(target=self._loop, name="sglang-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and take the last snapshot now."""
        self._stop.set()
        self._thread.join()
        self._read()
        self.stopped_at = time.monotonic()

    def summary(self, output_tokens: int) -> dict[str, Any]:
        """Return what the GPUs did during the run (all of them together), as JSON types.

        Each GPU's energy (J) comes from its driver's counter, else from its power integrated
        over its samples (trapezoids); one GPU with neither leaves the run's energy unknown.
        """
        snapshots = self.snapshots
        by_gpu: dict[str, list[tuple[float, Gpu]]] = {}
        for snapshot in snapshots:
            for gpu in snapshot.gpus:
                by_gpu.setdefault(gpu.uuid, []).append((snapshot.at, gpu))
        ends = [(series[0][1], series[-1][1]) for series in by_gpu.values()]
        counted = all(a.energy is not None and b.energy is not None for a, b in ends)
        energies = [_energy(series) for series in by_gpu.values()]
        known = [e for e in energies if e is not None]
        energy = sum(known) if energies and len(known) == len(energies) else None
        powers = [
            sum(g.power or 0.0 for g in s.gpus)
            for s in snapshots
            if any(g.power is not None for g in s.gpus)
        ]
        samples = [gpu for snapshot in snapshots for gpu in snapshot.gpus]
        throttled = [g for g in samples if g.throttle]
        temps = [g.temperature for g in samples if g.temperature is not None]
        utils = [g.utilization for g in samples if g.utilization is not None]
        seen = {p.pid for snapshot in snapshots for p in snapshot.processes}
        at_start = {p.pid for p in snapshots[0].processes} if snapshots else set()
        per_token = energy / output_tokens if energy is not None and output_tokens > 0 else None
        return {
            "duration": self.stopped_at - self.started_at,
            "samples": len(samples),
            "energy_j": energy,
            "energy_source": "counter" if counted else "integrated power",
            "mean_power_w": statistics.fmean(powers) if powers else None,
            "mean_utilization": statistics.fmean(utils) if utils else None,
            "throttled_fraction": len(throttled) / len(samples) if samples else 0.0,
            "throttle_reasons": sorted({r for g in throttled for r in g.throttle}),
            "max_temperature_c": max(temps, default=None),
            "new_xid_errors": sum(b.xid_errors - a.xid_errors for a, b in ends),
            "new_ecc_errors": sum((b.ecc_errors or 0) - (a.ecc_errors or 0) for a, b in ends),
            "foreign_pids": sorted(seen - at_start - self.allowed_pids),
            "energy_per_token_j": per_token,
        }


def _energy(series: Sequence[tuple[float, Gpu]]) -> float | None:
    """Joules one GPU used: from the driver's counter, else power integrated (trapezoids)."""
    first, last = series[0][1].energy, series[-1][1].energy
    if first is not None and last is not None:
        return last - first
    points = [(at, g.power) for at, g in series if g.power is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))
