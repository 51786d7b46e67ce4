"""What the ``sglang_gpu`` fixture returns."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_sglang.gpu.model import GpuSnapshot, SnapshotDiff
from pytest_sglang.gpu.probes import GpuProbe

__all__ = ["GpuState"]


@dataclass(frozen=True)
class GpuState:
    """GPU state for tests: take snapshots, compare them."""

    probe: GpuProbe

    def snapshot(self) -> GpuSnapshot:
        """Return every GPU and compute process now."""
        return self.probe.snapshot()

    @staticmethod
    def diff(before: GpuSnapshot, after: GpuSnapshot) -> SnapshotDiff:
        """Return what changed between two snapshots."""
        return before.diff(after)

    def describe(self) -> str:
        """Return where the state comes from, e.g. ``NVML (driver 570.86)``."""
        return self.probe.describe()
