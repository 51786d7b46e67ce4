"""GPU snapshots and the differences between them (plain data, no I/O)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GIB", "MIB", "Gpu", "GpuProcess", "GpuSnapshot", "SnapshotDiff"]

MIB = 1024**2
GIB = 1024**3


@dataclass(frozen=True)
class GpuProcess:
    """A compute process holding memory on one GPU (host PID namespace)."""

    pid: int
    gpu_uuid: str
    used_memory: int | None  # bytes; None where the driver cannot tell (permissions, WDDM)
    name: str = ""

    def describe(self) -> str:
        """Return e.g. ``pid 4242 (python3) 76.0 GiB``."""
        memory = "? GiB" if self.used_memory is None else f"{self.used_memory / GIB:.1f} GiB"
        return f"pid {self.pid} ({self.name or '?'}) {memory}"


@dataclass(frozen=True)
class Gpu:
    """One GPU: identity and memory in bytes (NVML memory info v2 where available)."""

    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int
    memory_free: int


@dataclass(frozen=True)
class GpuSnapshot:
    """Every GPU and compute process at one instant."""

    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...]
    taken_at: float = field(default_factory=time.time)

    def gpu(self, uuid: str) -> Gpu:
        """Return the GPU with this UUID.

        :raises GpuUnavailable: when it is gone (fell off the bus, container remapped).
        """
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        from pytest_sglang.errors import GpuUnavailable

        raise GpuUnavailable(
            f"GPU {uuid} is not visible any more; GPUs now: "
            f"{', '.join(g.uuid for g in self.gpus) or 'none'}"
        )

    def processes_on(self, uuid: str) -> tuple[GpuProcess, ...]:
        """Return the compute processes on the GPU with this UUID."""
        return tuple(p for p in self.processes if p.gpu_uuid == uuid)

    def diff(self, later: GpuSnapshot) -> SnapshotDiff:
        """Return what changed from this snapshot to ``later``."""
        return SnapshotDiff(self, later)

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types, for reports."""
        return {
            "taken_at": self.taken_at,
            "gpus": [g.__dict__ for g in self.gpus],
            "processes": [p.__dict__ for p in self.processes],
        }


@dataclass(frozen=True)
class SnapshotDiff:
    """The change between two snapshots: memory per GPU, processes that came and went."""

    before: GpuSnapshot
    after: GpuSnapshot

    @property
    def memory_delta(self) -> dict[str, int]:
        """Bytes of used memory gained (negative: released) per GPU UUID."""
        return {
            g.uuid: g.memory_used - self.before.gpu(g.uuid).memory_used
            for g in self.after.gpus
            if any(b.uuid == g.uuid for b in self.before.gpus)
        }

    @property
    def new_processes(self) -> tuple[GpuProcess, ...]:
        """Processes present after but not before (by pid and GPU)."""
        old = {(p.pid, p.gpu_uuid) for p in self.before.processes}
        return tuple(p for p in self.after.processes if (p.pid, p.gpu_uuid) not in old)

    @property
    def gone_processes(self) -> tuple[GpuProcess, ...]:
        """Processes present before but not after."""
        new = {(p.pid, p.gpu_uuid) for p in self.after.processes}
        return tuple(p for p in self.before.processes if (p.pid, p.gpu_uuid) not in new)
