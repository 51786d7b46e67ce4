"""A server that fails 5 % of requests: the measurement counts them and keeps every record."""

from __future__ import annotations

from collections.abc import Callable

from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import EmulatorProcess

Start = Callable[..., EmulatorProcess]


def test_five_percent_errors_are_counted_not_dropped(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--emulator-engine", "batch", "--emulator-speedup", "50",
        "--emulator-fault", "error-rate=0.05", "--emulator-seed", "7",
    )  # fmt: skip
    workload = Workload(input_len=8, output_len=4, requests=400, warmup=0)
    run = LoadGenerator(emulator.url).run_closed_loop(workload, 16)
    measurement = measure(run)
    assert len(run.records) == 400  # one record per request sent, failed ones included
    failed = [r for r in run.records if r.error is not None]
    assert measurement.failed == len(failed)
    assert measurement.completed + measurement.failed == 400
    # 5 % of 400 is 20; the seeded pattern stays far inside these bounds.
    assert 6 <= measurement.failed <= 40
    assert all(r.status == 500 for r in failed)
    assert not measurement.valid
    assert measurement.check("no_failed_requests").passed is False
