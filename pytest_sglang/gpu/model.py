"""The one GPU state model: a :class:`GpuSnapshot` of :class:`Gpu` records and processes.

For the pre/post-flight checks and the telemetry alike; None where a probe cannot tell.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.errors import GpuUnavailable

__all__ = [
    "GIB",
    "MIB",
    "Gpu",
    "GpuProcess",
    "GpuSnapshot",
    "SnapshotDiff",
    "throttle_names",
    "unmet_requirement",
]

MIB = 1024**2
GIB = 1024**3

#: NVML clock-event reasons (``nvmlClocksEventReason*``) that mean the GPU was held back;
#: idle, application clocks, sync boost and display clocks are not throttling.
THROTTLE_REASONS = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


def throttle_names(mask: int) -> tuple[str, ...]:
    """Return the throttling reasons set in an NVML clock-event-reason mask."""
    return tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


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
    """One GPU: identity, memory in bytes, telemetry (None where the source cannot tell)."""

    index: int
    uuid: str
    name: str
    memory_total: int
    memory_used: int
    memory_free: int
    utilization: float | None = None  # percent
    power: float | None = None  # watts
    energy: float | None = None  # joules, cumulative since an arbitrary origin
    sm_clock: float | None = None  # MHz
    temperature: float | None = None  # degrees C
    throttle: tuple[str, ...] = ()
    xid_errors: int = 0  # cumulative since the reader was made
    ecc_errors: int | None = None  # uncorrected, volatile, cumulative


@dataclass(frozen=True)
class GpuSnapshot:
    """Every GPU and compute process at one instant (``at``: monotonic, for intervals)."""

    gpus: tuple[Gpu, ...]
    processes: tuple[GpuProcess, ...]
    at: float = field(default_factory=time.monotonic)

    def gpu(self, uuid: str) -> Gpu:
        """Return the GPU with this UUID; :class:`GpuUnavailable` when it is gone."""
        for gpu in self.gpus:
            if gpu.uuid == uuid:
                return gpu
        raise GpuUnavailable(
            f"GPU {uuid} is not visible any more; GPUs now: "
            f"{', '.join(g.uuid for g in self.gpus) or 'none'}"
        )

    def only(self, uuids: Collection[str]) -> GpuSnapshot:
        """Return the part of this snapshot on the GPUs ``uuids`` (none of it when empty)."""
        gpus = tuple(g for g in self.gpus if g.uuid in uuids)
        return GpuSnapshot(gpus, tuple(p for p in self.processes if p.gpu_uuid in uuids), self.at)

    def diff(self, later: GpuSnapshot) -> SnapshotDiff:
        """Return what changed from this snapshot to ``later``."""
        before = {g.uuid: g.memory_used for g in self.gpus}
        return SnapshotDiff(
            {g.uuid: g.memory_used - before[g.uuid] for g in later.gpus if g.uuid in before},
            new_processes=_missing(later, self),
            gone_processes=_missing(self, later),
        )


@dataclass(frozen=True)
class SnapshotDiff:
    """The change between two snapshots: memory per GPU, processes that came and went."""

    #: Bytes of used memory gained (negative: released) per GPU UUID.
    memory_delta: dict[str, int]
    #: Processes present after but not before (by pid and GPU), and the reverse.
    new_processes: tuple[GpuProcess, ...]
    gone_processes: tuple[GpuProcess, ...]


def _missing(snapshot: GpuSnapshot, other: GpuSnapshot) -> tuple[GpuProcess, ...]:
    """Return the processes of ``snapshot`` that ``other`` lacks (by pid and GPU)."""
    known = {(p.pid, p.gpu_uuid) for p in other.processes}
    return tuple(p for p in snapshot.processes if (p.pid, p.gpu_uuid) not in known)


def unmet_requirement(snapshot: GpuSnapshot, requirement: dict[str, Any]) -> str | None:
    """Return why ``snapshot`` misses ``requirement`` (``sglang_requires``' kwargs), or None.

    ``gpus`` (default 1), ``gpu_name`` (in the name, any case), ``min_free_gib``.
    """
    count = int(requirement.get("gpus", 1))
    name = requirement.get("gpu_name")
    min_free = requirement.get("min_free_gib")
    matching = [
        g
        for g in snapshot.gpus
        if (name is None or str(name).lower() in g.name.lower())
        and (min_free is None or g.memory_free >= float(min_free) * GIB)
    ]
    if len(matching) >= count:
        return None
    wanted = f"{count} GPU{'s' if count != 1 else ''}"
    if name is not None:
        wanted += f" named like {name!r}"
    if min_free is not None:
        wanted += f" with >= {float(min_free):g} GiB free"
    found = [f"GPU {g.index} {g.name} ({g.memory_free / GIB:.1f} GiB free)" for g in snapshot.gpus]
    return f"requires {wanted}; found {len(matching)} such: {'; '.join(found) or 'no GPU'}"
