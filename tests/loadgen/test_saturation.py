from __future__ import annotations

import asyncio
import dataclasses
import time

from pytest_sglang.loadgen.progress import ClientLoad, ClientMonitor
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement, measure

W = Workload(input_len=4, output_len=3, requests=2, warmup=0)


def test_the_monitor_sees_a_blocked_loop_and_busy_cpu() -> None:
    async def scenario() -> ClientLoad:
        monitor = ClientMonitor(interval=0.01)
        monitor.start()
        await asyncio.sleep(0.05)
        # The loop is blocked for 0.2 s and the CPU busy for 0.05 s of it at least (a crowded
        # machine gives the process less than its wall time).
        end, cpu = time.perf_counter() + 0.2, time.process_time() + 0.05
        while time.perf_counter() < end or time.process_time() < cpu:
            pass
        await asyncio.sleep(0.05)
        return await monitor.stop()

    load = asyncio.run(scenario())
    assert load.lag_max >= 0.15
    assert load.cpu_seconds > 0.02 and 0 < load.cpu_fraction <= 1.5


def rec(index: int, gaps: float) -> RequestRecord:
    times = [0.1, 0.1 + gaps, 0.1 + 2 * gaps]
    return RequestRecord(
        index=index, warmup=False, input_len=4, output_len=3, sent=0.0, end=times[-1],
        chunk_times=times, chunk_tokens=[1, 1, 1], output_tokens_server=3,
    )  # fmt: skip


def checked(cpu: float, lag: float, gap: float = 0.02) -> Measurement:
    load = ClientLoad(cpu_seconds=cpu, wall_seconds=1.0, lag_p50=lag / 2, lag_p99=lag,
                      lag_max=lag, samples=20)  # fmt: skip
    run = LoadRun(W, ClosedLoop(2), (rec(0, gap), rec(1, gap)), 0.0, client=load)
    return measure(run)


def test_client_bound_flags_a_busy_core_or_a_late_loop() -> None:
    calm = checked(cpu=0.3, lag=0.001)
    assert calm.check("client_bound").passed is True
    assert (calm.client_cpu_fraction, calm.loop_lag_p99) == (0.3, 0.001)
    busy = checked(cpu=0.95, lag=0.001)
    assert busy.check("client_bound").passed is False
    assert "could not keep up" in busy.check("client_bound").detail
    # 6 ms late against 20 ms chunk gaps, with CPU to spare: reported, not judged.
    late = checked(cpu=0.6, lag=0.006)
    assert late.check("client_bound").passed is None
    assert "the latencies may carry that delay" in late.check("client_bound").detail
    # The same lag against 100 ms gaps is noise.
    assert checked(cpu=0.6, lag=0.006, gap=0.1).check("client_bound").passed is True


def test_a_run_without_a_monitor_is_not_judged_and_old_reports_load() -> None:
    run = LoadRun(W, ClosedLoop(1), (rec(0, 0.02),), 0.0)
    m = measure(run)
    assert m.check("client_bound").passed is None
    data = m.as_dict()
    del data["client_cpu_fraction"], data["loop_lag_p99"]  # a report from before them
    assert Measurement.from_dict(data).client_cpu_fraction is None
    assert dataclasses.replace(m).loop_lag_p99 is None
