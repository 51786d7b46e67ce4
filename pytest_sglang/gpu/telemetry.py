"""What the GPUs did during a run: sampled telemetry, energy per token, throttling.

A :class:`TelemetrySampler` reads the server's GPUs on a background thread at a fixed
interval (default 0.5 s) while a measurement runs, plus once exactly at its start and end:
utilization, memory used, power, SM clock, temperature, clock-throttle reasons, the energy
counter, and XID/ECC error counts. :meth:`TelemetrySampler.summary` turns the samples into a
:class:`RunTelemetry`: energy (from the driver's cumulative energy counter where there is
one, else the power integrated over the samples), mean power, the fraction of samples with
a throttling reason, the highest temperature, new XID/ECC errors, and compute processes that
appeared on the GPUs during the run. Three readers, as for GPU state (:mod:`.probes`):

* :class:`NvmlTelemetry`: NVML (``nvidia-ml-py``), the total-energy counter in mJ;
* :class:`SmiTelemetry`: ``nvidia-smi --query-gpu`` locally or over ssh (no energy counter:
  power is integrated);
* :class:`FakeTelemetry`: ``telemetry.json`` in a fake-GPU directory, written by the
  emulator with ``--emulator-gpu-dir`` (power and utilization that follow its batch).

Sampling costs a few NVML calls per GPU per interval on its own thread; the load
generator's CPU per token does not change measurably (``benchmarks/telemetry_cost.py``).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

from pytest_sglang.errors import GpuUnavailable

__all__ = [
    "THROTTLE_REASONS",
    "FakeTelemetry",
    "GpuSample",
    "NvmlTelemetry",
    "RunTelemetry",
    "SmiTelemetry",
    "TelemetryReader",
    "TelemetrySampler",
    "make_reader",
]

#: NVML clock-event reasons (``nvmlClocksEventReason*``) that mean the GPU was held back;
#: idle, application clocks, sync boost and display clocks are not throttling.
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
DEFAULT_INTERVAL = 0.5


@dataclass(frozen=True)
class GpuSample:
    """One GPU at one instant (``time.monotonic()`` seconds)."""

    at: float
    uuid: str
    utilization: float | None = None  # percent
    memory_used: int | None = None  # bytes
    power: float | None = None  # watts
    energy: float | None = None  # joules, cumulative since an arbitrary origin
    sm_clock: float | None = None  # MHz
    temperature: float | None = None  # degrees C
    throttle: tuple[str, ...] = ()
    xid_errors: int = 0  # cumulative in this reader
    ecc_errors: int | None = None  # uncorrected, volatile, cumulative
    pids: tuple[int, ...] = ()


class TelemetryReader(Protocol):
    """Reads telemetry of some GPUs."""

    def read(self, uuids: Sequence[str]) -> list[GpuSample]:
        """Return one sample per GPU in ``uuids`` (all GPUs when empty)."""
        ...

    def close(self) -> None:
        """Release what the reader holds."""
        ...


def throttle_names(mask: int) -> tuple[str, ...]:
    """Return the throttling reasons set in an NVML clock-event-reason mask."""
    return tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


class NvmlTelemetry:
    """Telemetry through NVML on this machine."""

    def __init__(self) -> None:
        from pytest_sglang.gpu.probes import import_nvml

        nvml: Any = import_nvml()
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML unavailable: {exc}") from None
        self._events: Any = None
        self._xids: dict[str, int] = {}
        try:
            self._events = nvml.nvmlEventSetCreate()
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                nvml.nvmlDeviceRegisterEvents(
                    handle, nvml.nvmlEventTypeXidCriticalError, self._events
                )
        except (nvml.NVMLError, AttributeError):
            self._events = None  # no XID events here (permissions, old driver)

    def _optional(self, call: Callable[..., Any], *args: Any) -> Any:
        """Return ``call(*args)``, or None where the GPU does not support the query."""
        try:
            return call(*args)
        except self._nvml.NVMLError:
            return None

    def _drain_xids(self) -> None:
        nvml = self._nvml
        while self._events is not None:
            try:
                event = nvml.nvmlEventSetWait(self._events, 0)
            except nvml.NVMLError:
                return  # timeout: no pending event
            uuid = str(nvml.nvmlDeviceGetUUID(event.device))
            self._xids[uuid] = self._xids.get(uuid, 0) + 1

    def read(self, uuids: Sequence[str]) -> list[GpuSample]:
        """Read every GPU in ``uuids`` (all when empty)."""
        nvml = self._nvml
        self._drain_xids()
        now = time.monotonic()
        samples = []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                h = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = str(nvml.nvmlDeviceGetUUID(h))
                if uuids and uuid not in uuids:
                    continue
                rates = self._optional(nvml.nvmlDeviceGetUtilizationRates, h)
                power = self._optional(nvml.nvmlDeviceGetPowerUsage, h)
                energy = self._optional(nvml.nvmlDeviceGetTotalEnergyConsumption, h)
                reasons = self._optional(nvml.nvmlDeviceGetCurrentClocksThrottleReasons, h)
                ecc = self._optional(
                    nvml.nvmlDeviceGetTotalEccErrors,
                    h,
                    nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                    nvml.NVML_VOLATILE_ECC,
                )
                procs = self._optional(nvml.nvmlDeviceGetComputeRunningProcesses, h)
                memory = self._optional(nvml.nvmlDeviceGetMemoryInfo, h)
                clock = self._optional(nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM)
                temp = self._optional(nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU)
                samples.append(
                    GpuSample(
                        at=now,
                        uuid=uuid,
                        utilization=None if rates is None else float(rates.gpu),
                        memory_used=None if memory is None else int(memory.used),
                        power=None if power is None else power / 1000.0,
                        energy=None if energy is None else energy / 1000.0,
                        sm_clock=None if clock is None else float(clock),
                        temperature=None if temp is None else float(temp),
                        throttle=throttle_names(int(reasons or 0)),
                        xid_errors=self._xids.get(uuid, 0),
                        ecc_errors=None if ecc is None else int(ecc),
                        pids=tuple(sorted(int(p.pid) for p in procs or ())),
                    )
                )
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML query failed: {exc}") from exc
        return samples

    def close(self) -> None:
        """Free the event set and pair ``nvmlInit``."""
        if self._events is not None:
            self._optional(self._nvml.nvmlEventSetFree, self._events)
            self._events = None
        self._nvml.nvmlShutdown()


#: ``nvidia-smi --query-gpu`` fields, in the order :class:`SmiTelemetry` reads them.
SMI_FIELDS = (
    "uuid", "utilization.gpu", "memory.used", "power.draw", "clocks.sm", "temperature.gpu",
    "clocks_event_reasons.active", "ecc.errors.uncorrected.volatile.total",
)  # fmt: skip


def _number(text: str) -> float | None:
    text = text.strip()
    if not text or text.startswith("[") or text in {"N/A", "Not Supported"}:
        return None
    try:
        return float(text)
    except ValueError:
        return None


class SmiTelemetry:
    """Telemetry from ``nvidia-smi``, locally or on ``host`` over ssh (BatchMode)."""

    def __init__(self, host: str | None = None, timeout: float = 10.0) -> None:
        from pytest_sglang.gpu.probes import SmiProbe

        # The probe runs nvidia-smi (locally or over ssh) and turns failures into reasons.
        self._probe = SmiProbe(host, timeout=timeout)

    def read(self, uuids: Sequence[str]) -> list[GpuSample]:
        """Query every GPU; keep those in ``uuids`` (all when empty)."""
        out = self._probe.run(
            [f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]
        )
        now = time.monotonic()
        samples = []
        for line in out.splitlines():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != len(SMI_FIELDS) or (uuids and cells[0] not in uuids):
                continue
            util, mem, power, clock, temp = (_number(c) for c in cells[1:6])
            reasons = cells[6]
            mask = int(reasons, 16) if reasons.startswith("0x") else 0
            ecc = _number(cells[7])
            samples.append(
                GpuSample(
                    at=now, uuid=cells[0], utilization=util,
                    memory_used=None if mem is None else int(mem * 1024**2), power=power,
                    sm_clock=clock, temperature=temp, throttle=throttle_names(mask),
                    ecc_errors=None if ecc is None else int(ecc),
                )
            )  # fmt: skip
        return samples

    def close(self) -> None:
        """Nothing to release."""


class FakeTelemetry:
    """Telemetry from ``telemetry.json`` in a fake-GPU directory (the emulator writes it).

    The file maps each GPU's UUID to its current ``power_w``, ``utilization``,
    ``sm_clock_mhz``, ``temperature_c``, ``throttle`` (names), the cumulative ``energy_j``
    (with ``energy_rate`` in J/s and ``written_at`` in ``time.monotonic()``, to extrapolate
    between writes) and error counts ``xid_errors`` and ``ecc_errors``.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / "telemetry.json"

    def read(self, uuids: Sequence[str]) -> list[GpuSample]:
        """Read the file (nothing while the emulator has not written it yet)."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return []
        now = time.monotonic()
        return [
            GpuSample(
                at=now, uuid=uuid, utilization=gpu.get("utilization"),
                power=gpu.get("power_w"), energy=_energy_now(gpu, now),
                sm_clock=gpu.get("sm_clock_mhz"), temperature=gpu.get("temperature_c"),
                throttle=tuple(gpu.get("throttle", ())), xid_errors=int(gpu.get("xid_errors", 0)),
                ecc_errors=gpu.get("ecc_errors"), pids=tuple(gpu.get("pids", ())),
            )
            for uuid, gpu in data.get("gpus", {}).items()
            if not uuids or uuid in uuids
        ]  # fmt: skip

    def close(self) -> None:
        """Nothing to release."""


def _energy_now(gpu: dict[str, Any], now: float) -> float | None:
    """Return the counter at ``now``: the file's value, grown at its rate since written."""
    energy = gpu.get("energy_j")
    if energy is None:
        return None
    rate, written = gpu.get("energy_rate"), gpu.get("written_at")
    if rate is None or written is None:
        return float(energy)
    # time.monotonic() is one clock for every process of a host (Linux).
    return float(energy) + float(rate) * max(0.0, now - float(written))


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

    def energy_per_token(self, output_tokens: int) -> float | None:
        """Joules per output token (None without energy or tokens)."""
        if self.energy is None or output_tokens <= 0:
            return None
        return self.energy / output_tokens

    def as_dict(self, output_tokens: int = 0) -> dict[str, Any]:
        """Return plain JSON types (with J/token when ``output_tokens`` is given)."""
        return {
            "duration": self.duration, "samples": self.samples, "energy_j": self.energy,
            "energy_source": self.energy_source, "mean_power_w": self.mean_power,
            "mean_utilization": self.mean_utilization,
            "throttled_fraction": self.throttled_fraction,
            "throttle_reasons": list(self.throttle_reasons),
            "max_temperature_c": self.max_temperature, "new_xid_errors": self.new_xid_errors,
            "new_ecc_errors": self.new_ecc_errors, "foreign_pids": list(self.foreign_pids),
            "energy_per_token_j": self.energy_per_token(output_tokens),
        }  # fmt: skip


@dataclass
class TelemetrySampler:
    """Samples ``uuids`` on a thread between :meth:`start` and :meth:`stop`.

    ``allowed_pids`` are processes expected on the GPUs (the server's); any other compute
    process that was not there at :meth:`start` counts as foreign.
    """

    reader: TelemetryReader
    uuids: Sequence[str] = ()
    interval: float = DEFAULT_INTERVAL
    allowed_pids: frozenset[int] = frozenset()
    samples: list[GpuSample] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    #: When sampling began and ended (``time.monotonic()``).
    started_at: float = 0.0
    stopped_at: float = 0.0
    _errors: list[str] = field(default_factory=list)

    def _read(self) -> None:
        try:
            self.samples.extend(self.reader.read(self.uuids))
        except GpuUnavailable as exc:  # a sample lost is reported, never a crash mid-run
            self._errors.append(str(exc))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._read()

    def start(self) -> None:
        """Take the first sample now and keep sampling on a daemon thread."""
        self.started_at = time.monotonic()
        self._read()
        self._thread = threading.Thread(target=self._loop, name="sglang-telemetry", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and take the last sample now."""
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
        """Summarise the samples (see the module docstring)."""
        by_gpu: dict[str, list[GpuSample]] = {}
        for sample in self.samples:
            by_gpu.setdefault(sample.uuid, []).append(sample)
        energy: float | None = 0.0
        source = "counter"
        powers: list[float] = []
        for series in by_gpu.values():
            first, last = series[0], series[-1]
            if first.energy is not None and last.energy is not None:
                gpu_energy: float | None = last.energy - first.energy
            else:
                source = "integrated power"
                gpu_energy = _integrate(series)
            energy = None if energy is None or gpu_energy is None else energy + gpu_energy
        duration = self.stopped_at - self.started_at
        for at in sorted({s.at for s in self.samples}):
            values = [s.power for s in self.samples if s.at == at and s.power is not None]
            if values:
                powers.append(sum(values))
        throttled = [s for s in self.samples if s.throttle]
        temps = [s.temperature for s in self.samples if s.temperature is not None]
        utils = [s.utilization for s in self.samples if s.utilization is not None]
        at_start = {p for s in self.samples[: len(by_gpu)] for p in s.pids}
        foreign = sorted(
            {p for s in self.samples for p in s.pids} - at_start - set(self.allowed_pids)
        )
        return RunTelemetry(
            duration=duration,
            samples=len(self.samples),
            energy=energy if by_gpu else None,
            energy_source=source,
            mean_power=sum(powers) / len(powers) if powers else None,
            mean_utilization=sum(utils) / len(utils) if utils else None,
            throttled_fraction=len(throttled) / len(self.samples) if self.samples else 0.0,
            throttle_reasons=tuple(sorted({r for s in throttled for r in s.throttle})),
            max_temperature=max(temps, default=None),
            new_xid_errors=sum(s[-1].xid_errors - s[0].xid_errors for s in by_gpu.values()),
            new_ecc_errors=sum(
                (s[-1].ecc_errors or 0) - (s[0].ecc_errors or 0) for s in by_gpu.values()
            ),
            foreign_pids=tuple(foreign),
        )


def _integrate(series: Sequence[GpuSample]) -> float | None:
    """Trapezoidal integral of power over the samples, in joules."""
    points = [(s.at, s.power) for s in series if s.power is not None]
    if len(points) < 2:
        return None
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))


def make_reader(*, host: str | None, fake_dir: Path | None) -> TelemetryReader:
    """Return the reader the settings ask for: fake, nvidia-smi over ssh, or NVML.

    :raises GpuUnavailable: with the reason when it cannot work here.
    """
    if fake_dir is not None:
        return FakeTelemetry(fake_dir)
    if host is not None:
        return SmiTelemetry(host)
    return NvmlTelemetry()
