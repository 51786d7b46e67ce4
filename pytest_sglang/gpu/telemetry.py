"""What the GPUs did during a run: telemetry sampled on a thread, energy per token, throttling."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Self

from pytest_sglang.errors import GpuUnavailable
from pytest_sglang.gpu.model import Gpu, GpuSnapshot
from pytest_sglang.gpu.probes import GpuProbe

__all__ = ["RunTelemetry", "TelemetrySampler"]

DEFAULT_INTERVAL = 0.5
#: The JSON name of each figure that has a unit.
UNITS = {"energy": "energy_j", "mean_power": "mean_power_w", "max_temperature": "max_temperature_c"}


@dataclass(frozen=True)
class RunTelemetry:
    """What the GPUs did during one run (all GPUs of the server together)."""

    duration: float
    samples: int
    energy: float | None  # joules
    energy_source: str  # "counter" or "integrated power"
    mean_power: float | None  # watts, all GPUs together
    mean_utilization: float | None
    throttled_fraction: float
    throttle_reasons: tuple[str, ...]
    max_temperature: float | None
    new_xid_errors: int
    new_ecc_errors: int
    foreign_pids: tuple[int, ...]

    def as_dict(self, output_tokens: int = 0) -> dict[str, Any]:
        """Return plain JSON types, the unit in a key's name, and J/token given the tokens."""
        plain = {
            UNITS.get(k, k): list(v) if isinstance(v, tuple) else v for k, v in vars(self).items()
        }
        per_token = (
            None if self.energy is None or output_tokens <= 0 else self.energy / output_tokens
        )
        return {**plain, "energy_per_token_j": per_token}


@dataclass
class TelemetrySampler:
    """Snapshots ``uuids`` on a thread between :meth:`start` and :meth:`stop`.

    ``uuids`` None: every GPU the probe shows (an attached server's host).

    A compute process not there at the start nor in ``allowed_pids`` counts as foreign.
    """

    probe: GpuProbe
    uuids: Sequence[str] | None = None
    interval: float = DEFAULT_INTERVAL
    allowed_pids: frozenset[int] = frozenset()
    snapshots: list[GpuSnapshot] = field(default_factory=list)
    #: When sampling began and ended (``time.monotonic()``).
    started_at: float = 0.0
    stopped_at: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _read(self) -> None:
        try:
            self.snapshots.append(self.probe.snapshot())
        except GpuUnavailable:
            pass  # a sample lost, never a crash mid-run

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
        if self._thread is not None:
            self._thread.join()
        self._read()
        self.stopped_at = time.monotonic()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def summary(self) -> RunTelemetry:
        """Summarise the snapshots; energy from the driver's counter, else integrated power."""
        by_gpu: dict[str, list[tuple[float, Gpu]]] = {}
        powers: list[float] = []
        uuids = self.uuids
        snapshots = [s if uuids is None else s.only(uuids) for s in self.snapshots]
        for snapshot in snapshots:
            for gpu in snapshot.gpus:
                by_gpu.setdefault(gpu.uuid, []).append((snapshot.at, gpu))
            if any(g.power is not None for g in snapshot.gpus):
                powers.append(sum(g.power or 0.0 for g in snapshot.gpus))
        ends = [(series[0][1], series[-1][1]) for series in by_gpu.values()]
        counted = all(a.energy is not None and b.energy is not None for a, b in ends)
        energies = [_energy(series) for series in by_gpu.values()]
        samples = [gpu for series in by_gpu.values() for _, gpu in series]
        throttled = [g for g in samples if g.throttle]
        temps = [g.temperature for g in samples if g.temperature is not None]
        utils = [g.utilization for g in samples if g.utilization is not None]
        seen = {p.pid for snapshot in snapshots for p in snapshot.processes}
        at_start = {p.pid for p in snapshots[0].processes} if snapshots else set()
        return RunTelemetry(
            duration=self.stopped_at - self.started_at,
            samples=len(samples),
            energy=None if not energies or None in energies else sum(e or 0.0 for e in energies),
            energy_source="counter" if counted else "integrated power",
            mean_power=statistics.fmean(powers) if powers else None,
            mean_utilization=statistics.fmean(utils) if utils else None,
            throttled_fraction=len(throttled) / len(samples) if samples else 0.0,
            throttle_reasons=tuple(sorted({r for g in throttled for r in g.throttle})),
            max_temperature=max(temps, default=None),
            new_xid_errors=sum(b.xid_errors - a.xid_errors for a, b in ends),
            new_ecc_errors=sum((b.ecc_errors or 0) - (a.ecc_errors or 0) for a, b in ends),
            foreign_pids=tuple(sorted(seen - at_start - set(self.allowed_pids))),
        )


def _energy(series: Sequence[tuple[float, Gpu]]) -> float | None:
    """Joules one GPU used: from the driver's counter, else power integrated (trapezoids)."""
    first, last = series[0][1].energy, series[-1][1].energy
    if first is not None and last is not None:
        return last - first
    points = [(at, g.power) for at, g in series if g.power is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))
