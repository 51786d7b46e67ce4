from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sglang.errors import GpuUnavailable
from pytest_sglang.gpu.telemetry import (
    FakeTelemetry,
    GpuSample,
    NvmlTelemetry,
    SmiTelemetry,
    TelemetrySampler,
    throttle_names,
)
from tests.gpu.test_gpu import install

UUIDS = ["GPU-a", "GPU-b"]


def write(directory: Path, energy: float, power: float, **extra: Any) -> None:
    gpus = {u: {"energy_j": energy, "power_w": power, "utilization": 50.0, **extra} for u in UUIDS}
    tmp = directory / "telemetry.json.tmp"
    tmp.write_text(json.dumps({"gpus": gpus}))
    tmp.replace(directory / "telemetry.json")


def test_energy_comes_from_the_counter_between_the_first_and_last_sample(tmp_path: Path) -> None:
    write(tmp_path, energy=1000.0, power=300.0)
    sampler = TelemetrySampler(FakeTelemetry(tmp_path), UUIDS, interval=0.01)
    with sampler:
        time.sleep(0.05)
        write(tmp_path, energy=1100.0, power=500.0, pids=[111])
        time.sleep(0.05)
        write(tmp_path, energy=1250.0, power=500.0, throttle=["hw_thermal"], pids=[111, 222])
    summary = sampler.summary()
    assert summary.energy == pytest.approx(2 * 250.0)
    assert summary.energy_source == "counter"
    assert summary.energy_per_token(1000) == pytest.approx(0.5)
    assert summary.samples >= 4 and 0 < summary.throttled_fraction < 1
    assert summary.throttle_reasons == ("hw_thermal",)
    # Processes that appear during the run are foreign unless they are the server's.
    assert summary.foreign_pids == (111, 222)
    sampler2 = TelemetrySampler(FakeTelemetry(tmp_path), UUIDS, allowed_pids=frozenset({111}))
    sampler2.start()
    sampler2.stop()
    assert sampler2.summary().foreign_pids == ()  # 222 was there at the start


def test_power_is_integrated_where_there_is_no_energy_counter() -> None:
    class Steps:
        def __init__(self) -> None:
            self.t = 0.0

        def read(self, uuids: Sequence[str]) -> list[GpuSample]:
            self.t += 1.0
            return [GpuSample(at=self.t, uuid="GPU-a", power=100.0 * self.t)]

        def close(self) -> None:
            pass

    sampler = TelemetrySampler(Steps(), interval=3600)
    sampler.start()
    sampler.stop()
    summary = sampler.summary()
    # Samples at t=1 (100 W) and t=2 (200 W): 150 J.
    assert summary.energy == pytest.approx(150.0)
    assert summary.energy_source == "integrated power"


def test_a_failing_reader_loses_samples_not_the_run() -> None:
    class Broken:
        def read(self, uuids: Sequence[str]) -> list[GpuSample]:
            raise GpuUnavailable("nvidia-smi did not answer within 10s")

        def close(self) -> None:
            pass

    sampler = TelemetrySampler(Broken(), interval=0.01)
    with sampler:
        time.sleep(0.03)
    assert sampler.summary().energy is None


def test_throttle_names_ignore_idle_and_application_clocks() -> None:
    assert throttle_names(0x1 | 0x2) == ()
    assert throttle_names(0x4 | 0x40) == ("sw_power_cap", "hw_thermal")


class FakeNvml:
    """A stand-in for pynvml with two GPUs; GPU-b does not support energy or ECC."""

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0
    nvmlEventTypeXidCriticalError = 8

    class NVMLError(Exception):
        pass

    def __init__(self) -> None:
        self.pending_xids = [1]
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.inits -= 1

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return UUIDS[h]

    def nvmlEventSetCreate(self) -> str:
        return "events"

    def nvmlDeviceRegisterEvents(self, h: int, kind: int, events: str) -> None:
        pass

    def nvmlEventSetWait(self, events: str, timeout: int) -> SimpleNamespace:
        if not self.pending_xids:
            raise self.NVMLError("Timeout")
        return SimpleNamespace(device=self.pending_xids.pop())

    def nvmlEventSetFree(self, events: str) -> None:
        pass

    def _unsupported_on_b(self, h: int, value: Any) -> Any:
        if h == 1:
            raise self.NVMLError("Not Supported")
        return value

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=97)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 350_500  # mW

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self._unsupported_on_b(h, 12_345_678)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return 0x20

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        return self._unsupported_on_b(h, 0)

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=4242)]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=76 * 1024**3)

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 71


def test_nvml_reader_converts_units_and_tolerates_unsupported_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    reader = NvmlTelemetry()
    a, b = reader.read([])
    assert (a.uuid, a.power, a.energy, a.utilization) == ("GPU-a", 350.5, 12_345.678, 97.0)
    assert (a.sm_clock, a.temperature, a.throttle, a.pids) == (
        1980.0,
        71.0,
        ("sw_thermal",),
        (4242,),
    )
    assert a.memory_used == 76 * 1024**3 and a.ecc_errors == 0
    assert (b.energy, b.ecc_errors) == (None, None)
    assert (a.xid_errors, b.xid_errors) == (0, 1)  # the pending XID event was on GPU-b
    assert [s.uuid for s in reader.read(["GPU-b"])] == ["GPU-b"]
    reader.close()
    assert fake.inits == 0


FAKE_SMI = r"""#!/bin/sh
echo 'GPU-a, 97, 76000, 350.50, 1980, 71, 0x0000000000000020, 0'
echo 'GPU-b, [N/A], 1, [N/A], 210, 35, 0x0000000000000001, [N/A]'
"""


def test_smi_reader_parses_query_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path, "nvidia-smi", FAKE_SMI)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    a, b = SmiTelemetry().read([])
    assert (a.utilization, a.power, a.sm_clock, a.throttle) == (
        97.0,
        350.5,
        1980.0,
        ("sw_thermal",),
    )
    assert a.memory_used == 76000 * 1024**2 and a.energy is None
    assert (b.utilization, b.power, b.throttle, b.ecc_errors) == (None, None, (), None)


def test_sampling_runs_on_its_own_thread() -> None:
    seen: list[str] = []

    class Recorder:
        def read(self, uuids: Sequence[str]) -> list[GpuSample]:
            seen.append(threading.current_thread().name)
            return []

        def close(self) -> None:
            pass

    with TelemetrySampler(Recorder(), interval=0.01):
        time.sleep(0.05)
    assert "sglang-telemetry" in seen


@pytest.mark.slow
def test_energy_per_token_matches_the_emulators_ground_truth(tmp_path: Path) -> None:
    from pytest_sglang.emulator.engine.trace import read_trace
    from pytest_sglang.gpu.probes import write_fake_gpus
    from pytest_sglang.loadgen.runner import LoadGenerator
    from pytest_sglang.loadgen.workload import Workload
    from pytest_sglang.measure.measurement import measure
    from pytest_sglang.testing import running_emulator

    gpus = tmp_path / "gpus"
    uuids = write_fake_gpus(gpus, 2)
    trace = tmp_path / "trace.jsonl"
    workload = Workload(input_len=32, output_len=64, requests=48, warmup=0)
    with running_emulator(
        tmp_path, "--tp-size", "2", "--emulator-engine", "batch", "--emulator-speedup", "10",
        "--emulator-gpu-dir", str(gpus), "--emulator-trace", str(trace),
    ) as emulator:  # fmt: skip
        sampler = TelemetrySampler(FakeTelemetry(gpus), uuids, interval=0.1)
        with sampler:
            run = LoadGenerator(emulator.url).run_closed_loop(workload, 8)
        emulator.stop()
    _, _, summary = read_trace(trace)
    assert summary is not None
    log = summary["energy_log"]

    def energy_at(t: float) -> float:  # the meter's total, linear between its changes
        before = max((p for p in log if p[0] <= t), key=lambda p: p[0])
        after = min((p for p in log if p[0] >= t), key=lambda p: p[0], default=before)
        if after[0] == before[0]:
            return float(before[1])
        return before[1] + (after[1] - before[1]) * (t - before[0]) / (after[0] - before[0])

    m = measure(run)
    summary_tel = sampler.summary()
    truth = (energy_at(sampler.stopped_at) - energy_at(sampler.started_at)) / m.output_tokens
    measured = summary_tel.energy_per_token(m.output_tokens)
    assert summary_tel.energy_source == "counter"
    assert measured == pytest.approx(truth, rel=0.02)
    assert summary_tel.mean_power is not None and summary_tel.mean_power > 2 * 100.0
