"""Synthetic bench results for verdict and report tests (no server needed)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Check, Distribution, Measurement, measure
from pytest_sglang.measure.results import BenchResult, Sweep
from pytest_sglang.report.entries import Schedule

W = Workload(input_len=32, output_len=4, requests=2, warmup=0)
BASE_CONFIG = {"model_path": "org/model", "tp_size": 8, "context_length": 262144,
               "max_running_requests": 1024, "speculative_algorithm": None}  # fmt: skip
SPEC_CONFIG = {**BASE_CONFIG, "max_running_requests": 48, "speculative_algorithm": "EAGLE3"}


def _template(workload: Workload) -> Measurement:
    records = tuple(
        RequestRecord(
            index=i, warmup=False, input_len=workload.input_len, output_len=4, sent=0.0,
            scheduled=None, end=1.0, chunk_times=[0.1, 0.4, 0.7, 1.0], chunk_tokens=[1, 1, 1, 1],
            chunk_tokens_exact=True, output_tokens_server=4, output_tokens_client=4,
            prompt_tokens=workload.input_len, spec_verify_ct=None, finish_reason="length",
            status=200, error=None,
        )
        for i in range(2)
    )  # fmt: skip
    run = LoadRun(workload=workload, load=ClosedLoop(2), records=records, started=0.0)
    return measure(run)


def dist(value: float) -> Distribution:
    return Distribution(count=1, mean=value, p50=value, p90=value, p99=value, min=value,
                        max=value)  # fmt: skip


def result(
    server: str,
    throughputs: Sequence[float],
    *,
    config: dict[str, Any] | None = None,
    concurrency: int = 1,
    workload: Workload = W,
    ttft: Sequence[float] | None = None,
    tpot: float | None = None,
    accept: float | None = None,
    invalid: bool = False,
    schedule: Schedule = "blocks",
) -> BenchResult:
    template = _template(workload)
    runs = []
    for index, value in enumerate(throughputs):
        changes: dict[str, Any] = {"output_throughput": float(value), "repeat": index}
        if ttft is not None:
            changes["ttft"] = dist(ttft[index])
        if tpot is not None:
            changes["tpot"] = dist(tpot)
        if accept is not None:
            changes["acceptance_length"] = accept
        if invalid:
            changes["checks"] = (Check("output_length", False, "3 of 64 requests were short"),)
        runs.append(dataclasses.replace(template, **changes))
    return BenchResult(server, workload, concurrency, tuple(runs),
                       dict(config if config is not None else BASE_CONFIG), schedule)  # fmt: skip


def sweep(server: str, per_level: dict[int, Sequence[float]], **kwargs: Any) -> Sweep:
    points = tuple(result(server, values, concurrency=level, **kwargs)
                   for level, values in sorted(per_level.items()))  # fmt: skip
    return Sweep(server, W, points)
