"""Fake GPU memory holders, for dry runs against a fake GPU probe (``--emulator-gpu-dir DIR``).

The directory format is the fake probe's: ``gpus.json`` lists the GPUs
(``{"gpus": [{"uuid", "name", "total_mib", "base_used_mib"}]}``) and every ``holder-*.json``
(``{"pid", "gpus": [uuid, ...], "used_mib", "name"}``) is a process holding ``used_mib`` on each
listed GPU, counted only while that pid lives, as a driver frees memory when a process dies.

Like SGLang, the emulator uses the GPUs ``CUDA_VISIBLE_DEVICES`` shows (indices or UUIDs),
``tp_size * pp_size`` of them (times ``dp_size`` without DP attention) from ``base_gpu_id`` on,
and holds about ``mem_fraction_static`` of each once loaded.

With the batch engine, ``telemetry.json`` in the same directory carries each GPU's power,
utilization and cumulative energy from the power model (:mod:`..engine.power`), rewritten
every ``TELEMETRY_INTERVAL``: what the plugin's fake telemetry reader samples.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_sglang.emulator.config.gpu_file import read_gpus
from pytest_sglang.emulator.engine.power import PowerMeter

#: How often ``telemetry.json`` is rewritten (readers extrapolate the energy in between).
TELEMETRY_INTERVAL = 0.05


class GpuHolder:
    """This process's holder file in a fake GPU directory."""

    def __init__(self, directory: Path, args: Mapping[str, Any], log: logging.Logger) -> None:
        self.directory = directory
        self._path = directory / f"holder-{os.getpid()}.json"
        self._log = log
        gpus = read_gpus(directory / "gpus.json")  # checked at parse time already
        visible = _visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
        dp = 1 if args.get("enable_dp_attention") else max(1, int(args.get("dp_size") or 1))
        count = max(1, int(args.get("tp_size") or 1)) * max(1, int(args.get("pp_size") or 1)) * dp
        start, step = int(args.get("base_gpu_id") or 0), max(1, int(args.get("gpu_id_step") or 1))
        chosen = visible[start::step][:count]
        if len(chosen) < count:
            log.warning("Only %d of the %d GPUs needed are visible.", len(chosen), count)
        self.gpus = chosen
        self._fraction = float(args.get("mem_fraction_static") or 0.85)

    def hold(self, used_mib: int | None = None) -> None:
        """Hold ``used_mib`` on each GPU (default: the static memory fraction of each)."""
        if not self.gpus:
            return
        if used_mib is None:
            used_mib = int(min(int(gpu["total_mib"]) for gpu in self.gpus) * self._fraction)
        holder = {
            "pid": os.getpid(),
            "gpus": [gpu["uuid"] for gpu in self.gpus],
            "used_mib": used_mib,
            "name": os.path.basename(sys.executable),
        }
        # Written whole then renamed: the probe may read at any moment.
        partial = self._path.with_suffix(".tmp")
        partial.write_text(json.dumps(holder))
        os.replace(partial, self._path)

    def release(self) -> None:
        """Remove the holder file (a killed process leaves it, and the probe ignores it)."""
        self._path.unlink(missing_ok=True)

    def write_telemetry(self, meter: PowerMeter) -> None:
        """Write ``telemetry.json`` for this process's GPUs from ``meter`` (see the module doc).

        ``energy_j`` is the counter when written and ``energy_rate`` how fast it grows (J per
        real second), so a reader extrapolates to its own moment of reading.
        """
        if not self.gpus:
            return
        now = time.monotonic()
        energy, rate = meter.energy(), meter.rate()
        utilization = 100.0 if meter.busy else 0.0
        path = self.directory / "telemetry.json"
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {"gpus": {}}
        for gpu in self.gpus:
            data["gpus"][gpu["uuid"]] = {
                "power_w": meter.power,
                "utilization": utilization,
                "energy_j": energy,
                "energy_rate": rate,
                "written_at": now,
                "temperature_c": 40.0 + meter.power / 20,
                "sm_clock_mhz": 1980.0,
                "throttle": [],
                "xid_errors": 0,
                "ecc_errors": 0,
                "pids": [os.getpid()],
            }
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(data))
        os.replace(partial, path)

    async def publish(self, meter: PowerMeter, interval: float = TELEMETRY_INTERVAL) -> None:
        """Write the telemetry every ``interval`` seconds, and when the GPUs fall idle."""
        idle = asyncio.Event()
        meter.on_idle = idle.set
        try:
            while True:
                self.write_telemetry(meter)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(idle.wait(), interval)
                idle.clear()
        finally:
            meter.on_idle = None


def _visible(gpus: list[dict[str, Any]], setting: str | None) -> list[dict[str, Any]]:
    if setting is None:
        return list(gpus)
    by_uuid = {str(gpu["uuid"]): gpu for gpu in gpus}
    visible = []
    for token in (part.strip() for part in setting.split(",")):
        if token.isdigit() and int(token) < len(gpus):
            visible.append(gpus[int(token)])
        elif token in by_uuid:
            visible.append(by_uuid[token])
        elif not token:
            continue
        else:
            break  # CUDA stops at the first invalid entry
    return visible
