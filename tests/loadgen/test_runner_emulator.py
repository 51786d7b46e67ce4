"""The load generator end to end against the emulator, a real process on a real socket.

Assertions are about behaviour (how many records, which requests were in flight, what the
server reported), never about speed: the bounds hold on a loaded 2-core CI runner.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.emulator.engine.arrivals import kernel_stamps_supported
from pytest_sglang.emulator.engine.trace import read_trace
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import ClosedLoop, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import EmulatorProcess, free_port, running_emulator

SMALL: dict[str, Any] = {"input_len": 12, "output_len": 16}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    # One emulator for the module: most tests only read what it answers.
    with running_emulator(tmp_path_factory.mktemp("emulator"), "--emulator-decode-ms", "2") as e:
        yield e


@pytest.fixture(scope="module")
def spec_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatorProcess]:
    args = (
        "--emulator-decode-ms",
        "2",
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        "emulated/EAGLE3-draft",
        "--emulator-accept-length",
        "2.0",
    )
    with running_emulator(tmp_path_factory.mktemp("spec"), *args) as e:
        yield e


def max_in_flight(records: Sequence[RequestRecord]) -> int:
    """The most requests in flight at once, from the records' send and end times."""
    events = sorted(
        [(r.sent, 1) for r in records] + [(r.end, -1) for r in records if r.end is not None],
        key=lambda e: (e[0], e[1]),  # an end before a send at the same instant
    )
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def assert_complete(run: LoadRun, workload: Workload) -> None:
    warmups = [r for r in run.records if r.warmup]
    assert len(run.records) == len(warmups) + workload.requests
    assert [r.index for r in run.measured] == list(range(workload.requests))
    failures = [r.error for r in run.records if r.error]
    assert not failures, failures
    m = measure(run)
    for name in ("no_failed_requests", "output_length", "token_counts", "chunk_token_counts"):
        assert m.check(name).passed is True, m.check(name)
    assert m.output_tokens == workload.requests * workload.output_len


@pytest.mark.parametrize("endpoint", ["generate", "completions", "chat"])
def test_closed_loop_on_each_endpoint(emulator: EmulatorProcess, endpoint: str) -> None:
    workload = Workload(**SMALL, requests=12, endpoint=endpoint)  # type: ignore[arg-type]
    run = LoadGenerator(emulator.url).run_closed_loop(workload, 4)
    assert run.load == ClosedLoop(4)
    assert_complete(run, workload)
    # The loop fills all 4 slots and never more, warm-up and measured phases apart.
    assert max_in_flight(run.measured) == 4
    assert max_in_flight(run.records) == 4
    measured = measure(run)
    assert measured.ttft is not None and measured.ttft.count == 12
    assert measured.itl is not None and measured.itl.count == 12 * 15
    assert 0 < measured.realised_concurrency <= 4.0 + 1e-9
    check = measured.check("input_length")
    if endpoint == "chat":
        assert check.passed is None  # the template's tokens are reported, not judged
    else:
        assert check.passed is True


def test_warmup_runs_first_and_is_excluded(emulator: EmulatorProcess) -> None:
    workload = Workload(**SMALL, requests=6, warmup=3)
    run = LoadGenerator(emulator.url).run_closed_loop(workload, 2)
    warm, measured = run.warmup_records, run.measured
    assert len(warm) == 3 and len(measured) == 6
    assert all(r.ok for r in run.records)
    # Every warm-up request has finished before the first measured one is sent.
    assert max(r.end or 0 for r in warm) <= min(r.sent for r in measured)
    m = measure(run)
    assert m.requests == 6 and len(m.records) == 6 and len(m.warmup_records) == 3
    assert m.duration <= max(r.end or 0 for r in measured) - min(r.sent for r in measured) + 1e-9


def test_default_warmup_is_one_per_slot(emulator: EmulatorProcess) -> None:
    run = LoadGenerator(emulator.url).run_closed_loop(Workload(**SMALL, requests=3), 2)
    assert len(run.warmup_records) == 2


def test_open_loop_keeps_its_schedule(emulator: EmulatorProcess) -> None:
    workload = Workload(**SMALL, requests=20, warmup=0)
    run = LoadGenerator(emulator.url).run_open_loop(workload, 100.0, arrival="constant")
    assert run.load == OpenLoop(100.0, "constant")
    assert_complete(run, workload)
    scheduled = [r.scheduled for r in run.measured if r.scheduled is not None]
    assert len(scheduled) == 20
    gaps = [b - a for a, b in itertools.pairwise(scheduled)]
    assert gaps == pytest.approx([0.01] * 19)
    assert all(r.sent >= (r.scheduled or 0) for r in run.measured)


def test_open_loop_poisson_with_a_concurrency_cap(emulator: EmulatorProcess) -> None:
    workload = Workload(**SMALL, requests=20, warmup=1, seed=3)
    run = LoadGenerator(emulator.url).run_open_loop(workload, 500.0, max_concurrency=2)
    assert_complete(run, workload)
    assert run.load.max_concurrency == 2
    assert max_in_flight(run.measured) <= 2


def test_sweep_runs_each_level_in_turn(emulator: EmulatorProcess) -> None:
    workload = Workload(**SMALL, requests=4, warmup=0)
    runs = LoadGenerator(emulator.url).run_sweep(workload, [1, 3])
    assert [r.load.concurrency for r in runs] == [1, 3]
    for run in runs:
        assert_complete(run, workload)
    assert max_in_flight(runs[0].records) == 1
    assert max_in_flight(runs[1].records) == 3
    # One level after the other, never overlapping.
    assert max(r.end or 0 for r in runs[0].records) <= min(r.sent for r in runs[1].records)


@pytest.mark.parametrize("endpoint", ["generate", "completions", "chat"])
def test_non_streamed(emulator: EmulatorProcess, endpoint: str) -> None:
    workload = Workload(**SMALL, requests=4, warmup=0, endpoint=endpoint, stream=False)  # type: ignore[arg-type]
    run = LoadGenerator(emulator.url).run_closed_loop(workload, 2)
    m = measure(run)
    assert m.completed == 4 and m.output_tokens == 4 * 16
    assert m.ttft is None and m.itl is None and m.e2e_latency is not None
    assert m.check("output_length").passed is True


@pytest.mark.parametrize("stream", [True, False])
def test_progress_reports_the_final_totals(emulator: EmulatorProcess, stream: bool) -> None:
    calls: list[tuple[int, int, int, float]] = []
    generator = LoadGenerator(
        emulator.url, progress=lambda *args: calls.append(args), progress_interval=0.05
    )
    generator.run_closed_loop(Workload(**SMALL, requests=5, warmup=1, stream=stream), 2)
    assert calls and calls[-1][:3] == (6, 6, 6 * 16)


def test_speculative_decoding_multi_token_chunks(spec_emulator: EmulatorProcess) -> None:
    workload = Workload(input_len=12, output_len=64, requests=8)
    run = LoadGenerator(spec_emulator.url).run_closed_loop(workload, 4)
    assert_complete(run, workload)
    m = measure(run)
    assert m.acceptance_length is not None and 1.2 < m.acceptance_length < 3.0
    assert any(n > 1 for r in run.measured for n in r.chunk_tokens)
    # Chunks carry ~2 tokens: the per-chunk gap is longer than the per-token one.
    assert m.itl is not None and m.itl_chunk is not None
    assert m.itl_chunk.count < m.itl.count
    assert m.itl_chunk.mean > m.itl.mean


def test_openai_endpoints_report_speculation_only_when_asked(
    spec_emulator: EmulatorProcess,
) -> None:
    workload = Workload(input_len=12, output_len=32, requests=4, warmup=0, endpoint="completions")
    run = LoadGenerator(spec_emulator.url).run_closed_loop(workload, 2)
    assert_complete(run, workload)
    assert any(n > 1 for r in run.measured for n in r.chunk_tokens)


@pytest.mark.skipif(not kernel_stamps_supported(), reason="kernel receive times: Linux only")
def test_send_time_is_when_the_bytes_left_for_the_server(
    start_emulator: object, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    emulator = start_emulator(  # type: ignore[operator]
        "--emulator-engine", "batch", "--emulator-speedup", "20", "--emulator-trace", str(trace)
    )
    workload = Workload(**SMALL, requests=5, warmup=0)
    run = LoadGenerator(emulator.url).run_closed_loop(workload, 1)
    emulator.stop()
    assert_complete(run, workload)
    clock, lines, _ = read_trace(trace)
    # perf_counter and monotonic are one clock on Linux; the trace writes wall-clock times.
    shift = clock["monotonic"] - clock["wall"]
    ours = [line for line in lines if line["prompt_tokens"] == SMALL["input_len"]]  # not warm-up
    arrived = sorted(line["arrived"] + shift for line in ours)
    assert len(arrived) == 5
    for record, arrival in zip(run.measured, arrived, strict=True):  # one at a time: in order
        # Stamped by the HTTP client's write, after the request was begun and before the
        # kernel received it (1 ms for converting the kernel's realtime stamp).
        assert record.started < record.sent <= arrival + 0.001
        assert record.first_token is not None and arrival < record.first_token


def test_closed_port_fails_every_request_and_keeps_every_record(tmp_path: Path) -> None:
    workload = Workload(**SMALL, requests=5, warmup=2)
    url = f"http://127.0.0.1:{free_port()}"
    run = LoadGenerator(url, connect_timeout=5).run_closed_loop(workload, 2)
    assert len(run.records) == 7
    assert all(r.status is None and r.error for r in run.records)
    assert all(r.sent == r.started for r in run.records)  # nothing was written anywhere
    assert all("Connect" in (r.error or "") for r in run.records), run.records[0].error
    m = measure(run)
    assert (m.requests, m.completed, m.failed) == (5, 0, 5)
    assert m.check("no_failed_requests").passed is False
    assert not m.valid


def test_over_long_prompt_is_a_recorded_error(start_emulator: object) -> None:
    emulator = start_emulator("--context-length", "64")  # type: ignore[operator]
    generator = LoadGenerator(emulator.url)
    # Streamed, SGLang answers 200 and reports the error in an event; not streamed, 400.
    for stream, status, prefix in (
        (True, 200, "error event in stream: "),
        (False, 400, "HTTP 400: "),
    ):
        workload = Workload(input_len=100, output_len=4, requests=3, warmup=0, stream=stream)
        run = generator.run_closed_loop(workload, 3)
        assert len(run.records) == 3
        for record in run.records:
            assert record.status == status
            assert record.error is not None and record.error.startswith(prefix)
            assert "longer than the model's context length (64 tokens)" in record.error
        assert measure(run).errors[0][1] == 3


def test_api_key(start_emulator: object) -> None:
    emulator = start_emulator("--api-key", "sk-test")  # type: ignore[operator]
    workload = Workload(**SMALL, requests=2, warmup=0)
    denied = LoadGenerator(emulator.url).run_closed_loop(workload, 1)
    assert [r.status for r in denied.records] == [401, 401]
    assert denied.records[0].error == "HTTP 401: Unauthorized"
    allowed = LoadGenerator(emulator.url, api_key="sk-test").run_closed_loop(workload, 1)
    assert all(r.ok for r in allowed.records)


# Without a stall or first-token limit, only the request timeout: its message still names it.
@pytest.mark.parametrize("limits", [{}, {"stall_timeout": None, "first_token_timeout": None}])
def test_a_hung_server_is_bounded_by_the_request_timeout(
    start_emulator: object, limits: dict[str, Any]
) -> None:
    emulator = start_emulator("--emulator-fault", "hang", wait="port")  # type: ignore[operator]
    workload = Workload(**SMALL, requests=3, warmup=1)
    run = LoadGenerator(emulator.url, request_timeout=1.0, **limits).run_closed_loop(workload, 2)
    assert len(run.records) == 4
    for record in run.records:
        assert record.status is None  # not even the response headers came
        assert record.error is not None and record.error.startswith("timed out")
    assert measure(run).failed == 3


def test_blocking_api_works_from_a_running_event_loop(emulator: EmulatorProcess) -> None:
    # An async test calling sglang_bench: asyncio.run would refuse inside a running loop.
    workload = Workload(**SMALL, requests=3, warmup=0)

    async def async_test() -> LoadRun:
        return LoadGenerator(emulator.url).run_closed_loop(workload, 2)

    run = asyncio.run(async_test())
    assert [r.ok for r in run.records] == [True, True, True]
