"""Ways to read GPU state, behind one interface.

* :class:`NvmlProbe`: NVML on this machine (``nvidia-ml-py``, module ``pynvml``, imported
  lazily inside ``warnings.catch_warnings()`` because the deprecated ``pynvml`` package
  hooks the import and warns), memory info v2 with a v1 fallback;
* :class:`SmiProbe`: ``nvidia-smi --query-*`` CSV, locally or over ssh (BatchMode, timeouts,
  ``[N/A]`` handled);
* :class:`FakeProbe`: a directory of JSON files, for dry runs and tests. ``gpus.json`` lists
  the GPUs; every ``holder-*.json`` is a process holding memory on some of them, counted only
  while that pid is alive (as a real driver frees memory when the process dies). The emulator
  writes holder files when started with ``--emulator-gpu-dir``.

A probe that cannot work here raises :class:`GpuUnavailable` with the reason, which the
plugin turns into a skip (or a failure under ``--sglang-require``).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import warnings
from pathlib import Path
from typing import Any, Protocol

from pytest_sglang.config.fake_gpus import read_fake_gpus
from pytest_sglang.errors import GpuUnavailable
from pytest_sglang.gpu.model import MIB, Gpu, GpuProcess, GpuSnapshot

__all__ = [
    "FakeProbe",
    "GpuProbe",
    "GpuUnavailable",
    "NvmlProbe",
    "SmiProbe",
    "import_nvml",
    "make_probe",
]

#: nvidia-smi can hang on a GPU in a bad state; never wait for it forever.
SMI_TIMEOUT = 30.0


class GpuProbe(Protocol):
    """Reads GPU state."""

    def snapshot(self) -> GpuSnapshot:
        """Return every GPU and compute process now.

        :raises GpuUnavailable: when the state cannot be read.
        """
        ...

    def describe(self) -> str:
        """Return a short description for messages, e.g. ``NVML (driver 570.86)``."""
        ...

    def close(self) -> None:
        """Release what the probe holds (NVML's reference count)."""
        ...


def import_nvml() -> Any:
    """Import ``pynvml`` (nvidia-ml-py) quietly: the deprecated ``pynvml`` package warns.

    :raises GpuUnavailable: nvidia-ml-py is not installed.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        try:
            import pynvml
        except ImportError:
            raise GpuUnavailable(
                "nvidia-ml-py is not installed (pip install 'pytest-sglang[gpu]')"
            ) from None
    return pynvml


class NvmlProbe:
    """GPU state from NVML on this machine."""

    def __init__(self) -> None:
        pynvml = import_nvml()
        self._nvml: Any = pynvml
        unavailable = tuple(
            getattr(pynvml, name)
            for name in (
                "NVMLError_LibraryNotFound",
                "NVMLError_DriverNotLoaded",
                "NVMLError_NoPermission",
                "NVMLError_LibRmVersionMismatch",
            )
            if hasattr(pynvml, name)
        )
        try:
            pynvml.nvmlInit()
        except unavailable as exc:
            raise GpuUnavailable(f"NVML unavailable: {exc}") from None
        self._driver = str(pynvml.nvmlSystemGetDriverVersion())
        self._closed = False

    def describe(self) -> str:
        """Return ``NVML (driver X)``."""
        return f"NVML (driver {self._driver})"

    def _memory(self, handle: Any) -> tuple[int, int, int]:
        nvml = self._nvml
        try:
            # v2 "used" excludes the driver's reserve and matches nvidia-smi; v1 counts
            # hundreds of MB on an idle GPU.
            info = nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
        except (nvml.NVMLError, TypeError, AttributeError):
            info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return int(info.total), int(info.used), int(info.free)

    def snapshot(self) -> GpuSnapshot:
        """Read every GPU's identity, memory and compute processes."""
        nvml = self._nvml
        gpus, processes = [], []
        try:
            for index in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = str(nvml.nvmlDeviceGetUUID(handle))
                total, used, free = self._memory(handle)
                gpus.append(
                    Gpu(index, uuid, str(nvml.nvmlDeviceGetName(handle)), total, used, free)
                )
                for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle):
                    try:
                        name = str(nvml.nvmlSystemGetProcessName(proc.pid))
                    except nvml.NVMLError:
                        name = ""
                    used_memory = proc.usedGpuMemory
                    processes.append(
                        GpuProcess(
                            int(proc.pid),
                            uuid,
                            None if used_memory is None else int(used_memory),
                            os.path.basename(name),
                        )
                    )
        except nvml.NVMLError as exc:
            raise GpuUnavailable(f"NVML query failed: {exc}") from exc
        return GpuSnapshot(tuple(gpus), tuple(processes))

    def close(self) -> None:
        """Pair the ``nvmlInit`` of the constructor (NVML is reference-counted)."""
        if not self._closed:
            self._closed = True
            self._nvml.nvmlShutdown()


def _smi_value(text: str) -> int | None:
    text = text.strip()
    # Even with "nounits" nvidia-smi prints [N/A], [Not Supported], [Insufficient Permissions].
    if not text or text.startswith("["):
        return None
    return int(float(text))


class SmiProbe:
    """GPU state from ``nvidia-smi`` CSV queries, locally or on ``host`` over ssh."""

    def __init__(self, host: str | None = None, *, timeout: float = SMI_TIMEOUT) -> None:
        self.host = host
        self.timeout = timeout

    def describe(self) -> str:
        """Return ``nvidia-smi on HOST``."""
        return f"nvidia-smi on {self.host}" if self.host else "nvidia-smi"

    def run(self, query: list[str]) -> str:
        """Run ``nvidia-smi QUERY...`` (over ssh when a host is set) and return its stdout.

        :raises GpuUnavailable: not found, timed out, or failed (with its last line).
        """
        argv = ["nvidia-smi", *query]
        if self.host:
            # ssh joins the remote argv with spaces: send one pre-quoted string. BatchMode
            # makes a missing key fail instead of waiting for a password forever.
            argv = [
                "ssh",
                "-o",
                "BatchMode=yes",
                "-o",
                "ConnectTimeout=10",
                self.host,
                "--",
                shlex.join(argv),
            ]
        try:
            result = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except FileNotFoundError as exc:
            raise GpuUnavailable(f"{argv[0]} not found: {exc}") from None
        except subprocess.TimeoutExpired:
            raise GpuUnavailable(
                f"{self.describe()} did not answer within {self.timeout:g}s"
            ) from None
        if result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            raise GpuUnavailable(
                f"{self.describe()} failed with exit code {result.returncode}: "
                f"{detail[-1] if detail else 'no output'}"
            )
        return result.stdout

    def snapshot(self) -> GpuSnapshot:
        """Query GPUs and compute apps; names go last because they may contain commas."""
        gpu_csv = self.run(
            [
                "--query-gpu=index,uuid,memory.total,memory.used,memory.free,name",
                "--format=csv,noheader,nounits",
            ]
        )
        gpus = []
        for line in filter(None, (raw.strip() for raw in gpu_csv.splitlines())):
            parts = [p.strip() for p in line.split(",", 5)]
            if len(parts) != 6:
                raise GpuUnavailable(f"unexpected nvidia-smi line: {line!r}")
            total, used, free = (_smi_value(v) or 0 for v in parts[2:5])
            gpus.append(Gpu(int(parts[0]), parts[1], parts[5], total * MIB, used * MIB, free * MIB))
        app_csv = self.run(
            [
                "--query-compute-apps=pid,gpu_uuid,used_memory,process_name",
                "--format=csv,noheader,nounits",
            ]
        )
        processes = []
        for line in filter(None, (raw.strip() for raw in app_csv.splitlines())):
            parts = [p.strip() for p in line.split(",", 3)]
            if len(parts) != 4 or not parts[0].isdigit():
                continue  # "No running processes found" on some drivers
            app_used = _smi_value(parts[2])
            processes.append(
                GpuProcess(
                    int(parts[0]),
                    parts[1],
                    None if app_used is None else app_used * MIB,
                    os.path.basename(parts[3]),
                )
            )
        return GpuSnapshot(tuple(gpus), tuple(processes))

    def close(self) -> None:
        """Nothing to release."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped) holds no GPU memory any more.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


class FakeProbe:
    """GPU state from a fake-GPU directory (see the module docstring for the format)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        if not (directory / "gpus.json").is_file():
            raise GpuUnavailable(f"fake GPU directory {directory} has no gpus.json")

    def describe(self) -> str:
        """Return ``fake GPUs in DIR``."""
        return f"fake GPUs in {self.directory}"

    def snapshot(self) -> GpuSnapshot:
        """Combine the GPU list with the holders whose process is alive."""
        try:
            listed = read_fake_gpus(self.directory / "gpus.json")
        except ValueError as exc:
            raise GpuUnavailable(str(exc)) from None
        holders = []
        for path in sorted(self.directory.glob("holder-*.json")):
            try:
                holder = json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # being written or removed right now
            if _pid_alive(int(holder["pid"])):
                holders.append(holder)
        processes = [
            GpuProcess(int(h["pid"]), uuid, int(h["used_mib"]) * MIB, str(h.get("name", "")))
            for h in holders
            for uuid in h["gpus"]
        ]
        gpus = []
        for index, gpu in enumerate(listed):
            total = int(gpu["total_mib"]) * MIB
            used = int(gpu.get("base_used_mib", 0)) * MIB + sum(
                p.used_memory or 0 for p in processes if p.gpu_uuid == gpu["uuid"]
            )
            gpus.append(Gpu(index, gpu["uuid"], gpu["name"], total, used, max(total - used, 0)))
        return GpuSnapshot(tuple(gpus), tuple(processes))

    def close(self) -> None:
        """Nothing to release."""


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
    """Return the probe the settings ask for: fake, nvidia-smi over ssh, or NVML.

    :raises GpuUnavailable: with the reason when it cannot work here.
    """
    if fake_dir is not None:
        return FakeProbe(fake_dir)
    if host is not None:
        return SmiProbe(host)
    return NvmlProbe()
