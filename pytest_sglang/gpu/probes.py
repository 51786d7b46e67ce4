"""Ways to read GPU state, behind one interface (:class:`GpuProbe`).

:class:`NvmlProbe`: NVML on this machine; :class:`SmiProbe`: ``nvidia-smi`` CSV over ssh (no
energy counter: the sampler integrates power); :class:`FakeProbe`: a directory
the emulator writes (``--emulator-gpu-dir``): ``gpus.json`` lists the GPUs, each
``holder-*.json`` a process holding memory (counted while its pid lives), ``telemetry.json``
each GPU's ``power_w``, ``utilization``, ``sm_clock_mhz``, ``temperature_c``, ``throttle``,
``xid_errors``, ``ecc_errors`` and cumulative ``energy_j`` (grown at ``energy_rate`` J/s
since ``written_at``, a ``time.monotonic()``). A probe that cannot work here raises
:class:`GpuUnavailable`, which the plugin turns into a skip (a failure under
``--sglang-require``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Protocol

from pytest_sglang.config.fake_gpus import read_fake_gpus
from pytest_sglang.errors import GpuUnavailable
from pytest_sglang.gpu.model import MIB, Gpu, GpuProcess, GpuSnapshot, throttle_names

__all__ = ["FakeProbe", "GpuProbe", "GpuState", "NvmlProbe", "SmiProbe", "make_probe"]

#: nvidia-smi can hang on a GPU in a bad state; never wait for it forever.
SMI_TIMEOUT = 30.0
#: ``nvidia-smi --query-gpu`` fields, the name last because it may contain commas.
SMI_GPU_FIELDS = (
    "index,uuid,memory.total,memory.used,memory.free,utilization.gpu,power.draw,clocks.sm,"
    "temperature.gpu,clocks_event_reasons.active,ecc.errors.uncorrected.volatile.total,name"
)


class GpuProbe(Protocol):
    """Reads GPU state; :meth:`snapshot` raises :class:`GpuUnavailable` when it cannot.

    What ``sglang_gpu`` returns (as :data:`GpuState`); ``before.diff(after)`` compares.
    """

    def snapshot(self) -> GpuSnapshot:
        """Return every GPU and compute process now."""
        ...

    def describe(self) -> str:
        """Return a short description for messages, e.g. ``NVML (driver 570.86)``."""
        ...

    def close(self) -> None:
        """Release what the probe holds (NVML's reference count)."""
        return None


#: The public name of the session's GPU state reader (the ``sglang_gpu`` fixture's value).
GpuState = GpuProbe


def _number(value: Any, scale: float = 1.0) -> float | None:
    """Return a reading times ``scale``; None where the source could not tell (``[N/A]``)."""
    try:
        return None if value is None else float(value) * scale
    except ValueError:
        return None


def _whole(value: Any, scale: int = 1) -> int | None:
    number = _number(value, scale)
    return None if number is None else int(number)


class NvmlProbe(GpuProbe):
    """GPU state from NVML on this machine; XID errors counted from NVML's event set."""

    def __init__(self) -> None:
        try:
            # The deprecated pynvml package warns when imported.
            with warnings.catch_warnings(action="ignore", category=FutureWarning):
                import pynvml
        except ImportError:
            message = "nvidia-ml-py is not installed (pip install 'pytest-sglang[gpu]')"
            raise GpuUnavailable(message) from None
        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
            self._driver = str(pynvml.nvmlSystemGetDriverVersion())
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except pynvml.NVMLError as exc:  # no library, no driver, no permission...
            raise GpuUnavailable(f"NVML unavailable: {exc}") from None
        self._closed = False
        self._xids: Counter[str] = Counter()
        try:
            self._events: Any = pynvml.nvmlEventSetCreate()
            for handle in self._handles:
                kind = pynvml.nvmlEventTypeXidCriticalError
                pynvml.nvmlDeviceRegisterEvents(handle, kind, self._events)
        except (pynvml.NVMLError, AttributeError):
            self._events = None  # no XID events here (permissions, old driver)

    def describe(self) -> str:
        """Return ``NVML (driver X)``."""
        return f"NVML (driver {self._driver})"

    def _get(self, name: str, *args: Any) -> Any:
        """Return ``nvml.NAME(*args)``, or None where the GPU does not support the query."""
        try:
            return getattr(self._nvml, name)(*args)
        except self._nvml.NVMLError:
            return None

    def _gpu(self, index: int, handle: Any) -> Gpu:
        nvml, get = self._nvml, self._get
        uuid = str(nvml.nvmlDeviceGetUUID(handle))
        try:
            # v2 "used" excludes the driver's reserve and matches nvidia-smi; v1 counts
            # hundreds of MB on an idle GPU.
            memory = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        except (nvml.NVMLError, TypeError, AttributeError):
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        rates = get("nvmlDeviceGetUtilizationRates", handle)
        kind, counter = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
        return Gpu(
            index,
            uuid,
            str(nvml.nvmlDeviceGetName(handle)),
            int(memory.total),
            int(memory.used),
            int(memory.free),
            utilization=_number(rates and rates.gpu),
            power=_number(get("nvmlDeviceGetPowerUsage", handle), 1e-3),  # mW
            energy=_number(get("nvmlDeviceGetTotalEnergyConsumption", handle), 1e-3),  # mJ
            sm_clock=_number(get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)),
            temperature=_number(get("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)),
            throttle=throttle_names(get("nvmlDeviceGetCurrentClocksThrottleReasons", handle) or 0),
            xid_errors=self._xids[uuid],
            ecc_errors=_whole(get("nvmlDeviceGetTotalEccErrors", handle, kind, counter)),
        )

    def snapshot(self) -> GpuSnapshot:
        """Read every GPU's identity, memory, telemetry and compute processes."""
        nvml, events = self._nvml, self._events
        gpus, processes = [], []
        try:
            # Count the XID events that came since, until the wait times out (None).
            while events is not None and (event := self._get("nvmlEventSetWait", events, 0)):
                self._xids[str(nvml.nvmlDeviceGetUUID(event.device))] += 1
            for index, handle in enumerate(self._handles):
                gpus.append(gpu := self._gpu(index, handle))
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    path = str(self._get("nvmlSystemGetProcessName", proc.pid) or "")
                    used = _whole(proc.usedGpuMemory)
                    processes.append(GpuProcess(proc.pid, gpu.uuid, used, os.path.basename(path)))
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML query failed: {exc}") from exc
        return GpuSnapshot(tuple(gpus), tuple(processes))

    def close(self) -> None:
        """Free the event set and pair the ``nvmlInit`` of the constructor (reference-counted)."""
        if not self._closed:
            self._closed = True
            if self._events is not None:
                self._get("nvmlEventSetFree", self._events)
            self._nvml.nvmlShutdown()


class SmiProbe(GpuProbe):
    """GPU state from ``nvidia-smi`` CSV queries on ``host``, over ssh."""

    def __init__(self, host: str) -> None:
        self.host = host
        self._fields = SMI_GPU_FIELDS

    def describe(self) -> str:
        """Return ``nvidia-smi on HOST``."""
        return f"nvidia-smi on {self.host}"

    def run(self, query: str) -> list[list[str]]:
        """Run an nvidia-smi query over ssh and return its CSV rows."""
        # ssh joins the remote argv with spaces: send one pre-quoted string. BatchMode makes a
        # missing key fail instead of waiting for a password forever.
        smi = shlex.join(["nvidia-smi", query, "--format=csv,noheader,nounits"])
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", self.host, "--", smi]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=SMI_TIMEOUT)
        except FileNotFoundError as exc:
            raise GpuUnavailable(f"ssh not found: {exc}") from None
        except subprocess.TimeoutExpired:
            message = f"{self.describe()} did not answer within {SMI_TIMEOUT:g}s"
            raise GpuUnavailable(message) from None
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise GpuUnavailable(
                f"{self.describe()} failed with exit code {result.returncode}: "
                f"{detail[-1] if detail else 'no output'}"
            )
        cells = query.count(",")  # the last field may contain commas
        return [
            [c.strip() for c in line.split(",", cells)]
            for line in result.stdout.splitlines()
            if line.strip()
        ]

    def snapshot(self) -> GpuSnapshot:
        """Query GPUs and compute apps (two nvidia-smi calls)."""
        try:
            rows = self.run(f"--query-gpu={self._fields}")
        except GpuUnavailable as exc:
            if "clocks_event_reasons" not in str(exc):
                raise
            # Drivers before R535 know the field by its old name.
            self._fields = SMI_GPU_FIELDS.replace("clocks_event", "clocks_throttle")
            rows = self.run(f"--query-gpu={self._fields}")
        apps = self.run("--query-compute-apps=pid,gpu_uuid,used_memory,process_name")
        processes = [
            GpuProcess(int(pid), uuid, _whole(used, MIB), os.path.basename(name))
            for pid, uuid, used, name in (row for row in apps if len(row) == 4)
            if pid.isdigit()  # not "No running processes found" (some drivers)
        ]
        return GpuSnapshot(tuple(map(_smi_gpu, rows)), tuple(processes))


def _smi_gpu(cells: list[str]) -> Gpu:
    """Return the GPU of one ``--query-gpu`` row (:data:`SMI_GPU_FIELDS`)."""
    try:
        index, uuid, total, used, free, rate, power, clock, temp, reasons, ecc, name = cells
        return Gpu(
            int(index),
            uuid,
            name,
            _whole(total, MIB) or 0,
            _whole(used, MIB) or 0,
            _whole(free, MIB) or 0,
            utilization=_number(rate),
            power=_number(power),
            sm_clock=_number(clock),
            temperature=_number(temp),
            throttle=throttle_names(int(reasons, 16) if reasons.startswith("0x") else 0),
            ecc_errors=_whole(ecc),
        )
    except ValueError:  # too few or too many fields, a non-number where one must be
        raise GpuUnavailable(f"unexpected nvidia-smi line: {', '.join(cells)!r}") from None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie (exited, not yet reaped) holds no GPU memory any more."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:  # gone (a zombie psutil cannot read is one too)
        return False
    except psutil.AccessDenied:
        return True


class FakeProbe(GpuProbe):
    """GPU state from a fake-GPU directory (see the module docstring for the format)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        if not (directory / "gpus.json").is_file():
            raise GpuUnavailable(f"fake GPU directory {directory} has no gpus.json")

    def describe(self) -> str:
        """Return ``fake GPUs in DIR``."""
        return f"fake GPUs in {self.directory}"

    def _read(self, name: str) -> Any:
        try:
            return json.loads((self.directory / name).read_text())
        except (OSError, ValueError):
            return None  # not written yet, or being written or removed right now

    def snapshot(self) -> GpuSnapshot:
        """Combine the GPU list, the holders whose process is alive, and the telemetry."""
        try:
            listed = read_fake_gpus(self.directory / "gpus.json")
        except ValueError as exc:
            raise GpuUnavailable(str(exc)) from None
        holders = (self._read(p.name) for p in sorted(self.directory.glob("holder-*.json")))
        processes = [
            GpuProcess(int(h["pid"]), uuid, int(h["used_mib"]) * MIB, str(h.get("name", "")))
            for h in holders
            if h is not None and _pid_alive(int(h["pid"]))
            for uuid in h["gpus"]
        ]
        # The emulator writes telemetry.json whole (os.replace): a dict of each GPU's readings.
        telemetry = (self._read("telemetry.json") or {}).get("gpus", {})
        now = time.monotonic()
        gpus = []
        for index, gpu in enumerate(listed):
            total = int(gpu["total_mib"]) * MIB
            held = sum(p.used_memory or 0 for p in processes if p.gpu_uuid == gpu["uuid"])
            used = int(gpu.get("base_used_mib", 0)) * MIB + held
            t = telemetry.get(gpu["uuid"], {})
            energy = t.get("energy_j")
            if energy is not None and "energy_rate" in t and "written_at" in t:
                # time.monotonic() is one clock for every process of a host (Linux).
                energy += t["energy_rate"] * max(0.0, now - t["written_at"])
            gpus.append(
                Gpu(
                    index,
                    gpu["uuid"],
                    gpu["name"],
                    total,
                    used,
                    max(total - used, 0),
                    utilization=_number(t.get("utilization")),
                    power=_number(t.get("power_w")),
                    energy=_number(energy),
                    sm_clock=_number(t.get("sm_clock_mhz")),
                    temperature=_number(t.get("temperature_c")),
                    throttle=tuple(t.get("throttle", ())),
                    xid_errors=int(t.get("xid_errors", 0)),
                    ecc_errors=t.get("ecc_errors"),
                )
            )
        return GpuSnapshot(tuple(gpus), tuple(processes), at=now)


def write_fake_gpus(
    directory: Path, count: int, *, name: str = "NVIDIA H200", total_mib: int = 143771
) -> list[str]:
    """Create ``gpus.json`` for ``count`` fake GPUs; return their UUIDs."""
    uuids = [f"GPU-fake{index:04d}-0000-0000-0000-000000000000" for index in range(count)]
    gpus = [{"uuid": u, "name": name, "total_mib": total_mib, "base_used_mib": 0} for u in uuids]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "gpus.json").write_text(json.dumps({"gpus": gpus}, indent=1))
    return uuids


def make_probe(*, host: str | None, fake_dir: Path | None) -> GpuProbe:
    """Return the probe the settings ask for: fake, nvidia-smi over ssh, or NVML."""
    if fake_dir is not None:
        return FakeProbe(fake_dir)
    return NvmlProbe() if host is None else SmiProbe(host)
