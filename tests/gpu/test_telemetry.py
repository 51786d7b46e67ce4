from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sglang.errors import GpuUnavailable
from pytest_sglang.gpu.model import Gpu, GpuSnapshot, throttle_names
from pytest_sglang.gpu.probes import FakeProbe, NvmlProbe, write_fake_gpus
from pytest_sglang.gpu.telemetry import TelemetrySampler
from tests.faults.harness import wait_for
from tests.gpu.test_gpu import hold, smi_probe

UUIDS = ["GPU-a", "GPU-b"]


def write(directory: Path, energy: float, power: float, **extra: Any) -> None:
    uuids = [g["uuid"] for g in json.loads((directory / "gpus.json").read_text())["gpus"]]
    gpus = {u: {"energy_j": energy, "power_w": power, "utilization": 50.0, **extra} for u in uuids}
    tmp = directory / "telemetry.json.tmp"
    tmp.write_text(json.dumps({"gpus": gpus}))
    tmp.replace(directory / "telemetry.json")


def gpu(uuid: str = "GPU-a", **telemetry: Any) -> Gpu:
    return Gpu(0, uuid, "NVIDIA H200", 0, 0, 0, **telemetry)


class Probe:
    """A probe that returns the snapshots ``make`` builds, counting its calls."""

    def __init__(self, make: Callable[[int], GpuSnapshot]) -> None:
        self.make, self.calls = make, 0

    def snapshot(self) -> GpuSnapshot:
        self.calls += 1
        return self.make(self.calls)

    def describe(self) -> str:
        return "test probe"

    def close(self) -> None:
        pass


def test_energy_comes_from_the_counter_between_the_first_and_last_sample(tmp_path: Path) -> None:
    uuids = write_fake_gpus(tmp_path, 2)
    write(tmp_path, energy=1000.0, power=300.0)
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])]
    try:
        sampler = TelemetrySampler(FakeProbe(tmp_path), uuids, interval=0.01)
        sampler.start()
        time.sleep(0.05)
        write(tmp_path, energy=1100.0, power=500.0)
        hold(tmp_path, sleepers[0].pid, uuids, 1024)
        time.sleep(0.05)
        write(tmp_path, energy=1250.0, power=500.0, throttle=["hw_thermal"])
        sleepers.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]))
        hold(tmp_path, sleepers[1].pid, uuids[:1], 1024)
        sampler.stop()
        summary = sampler.summary(1000)
        assert summary["energy_j"] == pytest.approx(2 * 250.0)
        assert summary["energy_source"] == "counter"
        assert summary["energy_per_token_j"] == pytest.approx(0.5)
        assert summary["samples"] >= 4 and 0 < summary["throttled_fraction"] < 1
        assert summary["throttle_reasons"] == ["hw_thermal"]
        # Processes that appear during the run are foreign unless they are the server's.
        assert summary["foreign_pids"] == sorted(s.pid for s in sleepers)
        allowed = frozenset({sleepers[0].pid})
        sampler2 = TelemetrySampler(FakeProbe(tmp_path), uuids, allowed_pids=allowed)
        sampler2.start()
        sampler2.stop()
        assert sampler2.summary(1)["foreign_pids"] == []  # the other was there at the start
        # Only the GPUs asked for count: the second process holds none of uuids[1:].
        sampler3 = TelemetrySampler(FakeProbe(tmp_path), uuids[1:], interval=3600)
        sampler3.start()
        sampler3.stop()
        assert sampler3.summary(1)["samples"] == 2
    finally:
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait()


def test_power_is_integrated_where_there_is_no_energy_counter() -> None:
    def steps(t: int) -> GpuSnapshot:
        return GpuSnapshot((gpu(power=100.0 * t),), (), at=float(t))

    sampler = TelemetrySampler(Probe(steps), interval=3600)
    sampler.start()
    sampler.stop()
    summary = sampler.summary(1000)
    # Samples at t=1 (100 W) and t=2 (200 W): 150 J.
    assert summary["energy_j"] == pytest.approx(150.0)
    assert summary["energy_source"] == "integrated power"


def test_energy_is_unknown_when_a_gpu_reports_neither_counter_nor_power() -> None:
    # GPU-b reads no power at all: the total would be GPU-a's alone, passed off as the run's.
    def steps(t: int) -> GpuSnapshot:
        return GpuSnapshot((gpu(power=100.0 * t), gpu("GPU-b")), (), at=float(t))

    sampler = TelemetrySampler(Probe(steps), interval=3600)
    sampler.start()
    sampler.stop()
    assert sampler.summary(1000)["energy_j"] is None


def test_each_gpu_gives_its_energy_by_its_counter_else_by_its_own_power() -> None:
    # GPU-a counts 500 J a step; GPU-b has no counter, reads 100 W, and misses one reading.
    def steps(t: int) -> GpuSnapshot:
        b = gpu("GPU-b", power=None if t == 2 else 100.0)
        return GpuSnapshot((gpu(energy=500.0 * t, power=300.0), b), (), at=float(t))

    sampler = TelemetrySampler(Probe(steps), interval=3600)
    sampler.start()  # t = 1
    sampler._read()  # t = 2: GPU-b reads no power
    sampler.stop()  # t = 3
    summary = sampler.summary(1000)
    # GPU-a: 1500 - 500 J by its counter; GPU-b: 100 W over 1 s .. 3 s, its own two readings.
    assert summary["energy_j"] == pytest.approx(1000.0 + 200.0)
    assert summary["energy_source"] == "integrated power"


def test_a_failing_reader_loses_samples_not_the_run() -> None:
    def broken(t: int) -> GpuSnapshot:
        raise GpuUnavailable("nvidia-smi did not answer within 10s")

    sampler = TelemetrySampler(Probe(broken), interval=0.01)
    sampler.start()
    time.sleep(0.03)
    sampler.stop()
    assert sampler.summary(1)["energy_j"] is None


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

    def nvmlSystemGetDriverVersion(self) -> str:
        return "570.86"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA H200"

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        return "/usr/bin/python3"

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
        return [SimpleNamespace(pid=4242, usedGpuMemory=76 * 1024**3)]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=141 * 1024**3, used=76 * 1024**3, free=65 * 1024**3)

    def nvmlDeviceGetClockInfo(self, h: int, clock: int) -> int:
        return 1980

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        return 71


def test_nvml_reader_converts_units_and_tolerates_unsupported_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    probe = NvmlProbe()
    snapshot = probe.snapshot()
    a, b = snapshot.gpus
    assert (a.uuid, a.power, a.energy, a.utilization) == ("GPU-a", 350.5, 12_345.678, 97.0)
    assert (a.sm_clock, a.temperature, a.throttle) == (1980.0, 71.0, ("sw_thermal",))
    assert [p.describe() for p in snapshot.only(["GPU-a"]).processes] == [
        "pid 4242 (python3) 76.0 GiB"
    ]
    assert a.memory_used == 76 * 1024**3 and a.ecc_errors == 0
    assert (b.energy, b.ecc_errors) == (None, None)
    assert (a.xid_errors, b.xid_errors) == (0, 1)  # the pending XID event was on GPU-b
    probe.close()
    probe.close()
    assert fake.inits == 0


FAKE_SMI = r"""#!/bin/sh
case "$*" in
  *query-gpu*)
    echo '0, GPU-a, 143771, 76000, 67771, 97, 350.50, 1980, 71, 0x0000000000000020, 0, H200'
    echo '1, GPU-b, 143771, 1, 143770, [N/A], [N/A], 210, 35, 0x01, [N/A], NVIDIA H200, rev B' ;;
esac
"""


def test_smi_reader_parses_query_csv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = smi_probe(tmp_path, monkeypatch, FAKE_SMI).snapshot().gpus
    assert (a.utilization, a.power, a.sm_clock, a.throttle) == (
        97.0,
        350.5,
        1980.0,
        ("sw_thermal",),
    )
    assert a.memory_used == 76000 * 1024**2 and a.energy is None
    assert (b.utilization, b.power, b.throttle, b.ecc_errors) == (None, None, (), None)


def test_sampling_runs_on_its_own_thread() -> None:
    sampled = threading.Event()

    def record(t: int) -> GpuSnapshot:
        if threading.current_thread().name == "sglang-telemetry":
            sampled.set()
        return GpuSnapshot((), ())

    sampler = TelemetrySampler(Probe(record), interval=0.01)
    sampler.start()
    try:
        assert sampled.wait(timeout=30), "the sampler thread never read the GPUs"
    finally:
        sampler.stop()


def published_idle(directory: Path) -> bool:
    """Whether every GPU in the fake directory's telemetry was last published idle."""
    try:
        gpus = json.loads((directory / "telemetry.json").read_text())["gpus"]
    except (OSError, ValueError, KeyError):
        return False
    return all(gpu["utilization"] == 0 for gpu in gpus.values())


@pytest.mark.slow
def test_energy_per_token_matches_the_emulators_ground_truth(tmp_path: Path) -> None:
    from pytest_sglang.emulator.engine.power import IDLE_W
    from pytest_sglang.emulator.engine.trace import read_trace
    from pytest_sglang.loadgen.runner import LoadGenerator
    from pytest_sglang.loadgen.workload import Workload
    from pytest_sglang.measure.measurement import measure
    from pytest_sglang.testing import running_emulator

    gpus = tmp_path / "gpus"
    uuids = write_fake_gpus(gpus, 2)
    trace = tmp_path / "trace.jsonl"
    workload = Workload(input_len=32, output_len=64, requests=48, warmup=0)
    speedup = 10  # the meter accrues model time: idle watts times the speed-up per second
    with running_emulator(
        tmp_path, "--tp-size", "2", "--emulator-engine", "batch",
        "--emulator-speedup", str(speedup), "--emulator-gpu-dir", str(gpus),
        "--emulator-trace", str(trace),
    ) as emulator:  # fmt: skip
        sampler = TelemetrySampler(FakeProbe(gpus), uuids, interval=0.1)
        sampler.start()
        run = LoadGenerator(emulator.url).run_closed_loop(workload, 8)
        # The last reading grows the published counter at its published rate: stop once
        # the emulator has published its GPUs idle (at once unless the machine is busy).
        assert wait_for(lambda: published_idle(gpus), 30), "the GPUs never went idle"
        sampler.stop()
        emulator.stop()
    _, _, summary = read_trace(trace)
    assert summary is not None
    log = summary["energy_log"]

    def energy_at(t: float) -> float:  # the meter's total, linear between its changes
        before = max((p for p in log if p[0] <= t), key=lambda p: p[0])
        after = min((p for p in log if p[0] >= t), key=lambda p: p[0], default=None)
        if after is None:  # idle since the last change: idle power, in model time
            return float(before[1] + IDLE_W * speedup * len(uuids) * (t - before[0]))
        if after[0] == before[0]:
            return float(before[1])
        return before[1] + (after[1] - before[1]) * (t - before[0]) / (after[0] - before[0])

    m = measure(run)
    summary_tel = sampler.summary(m.output_tokens)
    truth = (energy_at(sampler.stopped_at) - energy_at(sampler.started_at)) / m.output_tokens
    measured = summary_tel["energy_per_token_j"]
    assert summary_tel["energy_source"] == "counter"
    assert measured == pytest.approx(truth, rel=0.02)
    assert summary_tel["mean_power_w"] is not None and summary_tel["mean_power_w"] > 2 * 100.0


OLD_DRIVER_SMI = r"""#!/bin/sh
case "$*" in
  *clocks_event_reasons*)
    echo 'Field "clocks_event_reasons.active" is not a valid field to query.' >&2; exit 2 ;;
  *query-gpu*)
    echo '0, GPU-a, 143771, 76000, 67771, 97, 350.50, 1980, 71, 0x0000000000000040, 0, H100' ;;
esac
"""


def test_smi_probe_works_with_drivers_that_name_throttle_reasons_the_old_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = smi_probe(tmp_path, monkeypatch, OLD_DRIVER_SMI)
    for _ in range(2):
        (gpu,) = probe.snapshot().gpus
        assert (gpu.uuid, gpu.throttle) == ("GPU-a", ("hw_thermal",))
