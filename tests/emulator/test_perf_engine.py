"""The batch engine end to end: a real emulator process, sped up, driven over HTTP.

Bounds are generous on purpose: these tests check the shape (throughput grows with
concurrency, speculation streams multi-token chunks, requests beyond the cap queue), not the
calibrated figures, which ``test_perf_model`` checks in model time and
``benchmarks/calibration.py`` end to end.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pytest_sglang.emulator.config.cli import build_parser, parse_args
from pytest_sglang.emulator.engine.perf_model import DEFAULT_PARAMS, decode_ms, prefill_ms
from pytest_sglang.emulator.engine.trace import read_trace
from pytest_sglang.loadgen import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import EAGLE3_FLAGS, EmulatorProcess
from tests.emulator.conftest import client, sse_json

Start = Callable[..., EmulatorProcess]

BATCH = ("--emulator-engine", "batch", "--emulator-speedup", "20", "--enable-metrics")


def _body(tokens: int, *, stream: bool = False, first: int = 1000) -> dict[str, Any]:
    return {
        "input_ids": list(range(first, first + 32)),
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
        "stream": stream,
    }


def _metrics(http: httpx.Client) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("sglang:") and "{" in line:
            name = line[len("sglang:") : line.index("{")]
            if "le=" not in line:
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values


# -- options -------------------------------------------------------------------------------


def test_batch_engine_is_the_default_unless_simple_timing_is_given() -> None:
    assert parse_args(["--model-path", "m"]).options.perf.engine == "batch"
    assert parse_args(["--model-path", "m", "--emulator-decode-ms", "1"]).options.perf.engine == (
        "simple"
    )
    assert parse_args(["--model-path", "m", "--emulator-prefill-ms", "5"]).options.perf.engine == (
        "simple"
    )
    explicit = parse_args(
        ["--model-path", "m", "--emulator-decode-ms", "1", "--emulator-engine", "batch"]
    )
    assert explicit.options.perf.engine == "batch"
    assert explicit.options.decode_ms == 1.0
    assert parse_args(["--model-path", "m"]).options.decode_ms == 10.0


def test_perf_options_parse_with_defaults_from_the_model() -> None:
    perf = parse_args(["--model-path", "m"]).options.perf
    assert perf.params == DEFAULT_PARAMS
    assert (perf.speedup, perf.noise, perf.trace) == (1.0, 0.0, None)
    perf = parse_args(
        [
            "--model-path",
            "m",
            "--emulator-speedup",
            "12.5",
            "--emulator-noise",
            "0.03",
            "--emulator-seed",
            "7",
            "--emulator-step-base-ms",
            "5",
            "--emulator-draft-per-token-ms",
            "0.2",
            "--emulator-trace",
            "/tmp/t.jsonl",
        ]
    ).options.perf
    assert (perf.speedup, perf.noise, perf.seed) == (12.5, 0.03, 7)
    assert perf.params.step_base_ms == 5.0 and perf.params.draft_per_token_ms == 0.2
    assert perf.trace == Path("/tmp/t.jsonl")


def test_the_default_seed_follows_the_configuration_not_the_address() -> None:
    def seed(*flags: str) -> int:
        return parse_args(["--model-path", "m", *flags]).options.perf.seed

    baseline = seed("--port", "30000")
    assert seed("--port", "31000", "--host", "0.0.0.0") == baseline  # reproducible
    assert seed(*EAGLE3_FLAGS) != baseline  # two profiles do not share their noise
    assert seed("--emulator-seed", "7") == 7


@pytest.mark.parametrize(
    "argv",
    [
        ["--emulator-speedup", "0"],
        ["--emulator-speedup", "-2"],
        ["--emulator-noise", "-0.1"],
        ["--emulator-step-per-token-ms", "nan"],
        ["--emulator-engine", "fast"],
    ],
)
def test_bad_perf_options_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse_args(["--model-path", "m", *argv])
    assert info.value.code == 2


def test_every_perf_option_has_help() -> None:
    parser = build_parser()
    perf = [g for g in parser._action_groups if g.title == "emulator performance model"]
    assert perf, "no 'emulator performance model' option group"
    actions = perf[0]._group_actions
    assert len(actions) >= 12
    for action in actions:
        assert action.help and len(action.help) > 20, action.option_strings
    text = parser.format_help()
    for name in ("--emulator-speedup", "--emulator-noise", "--emulator-trace", "--emulator-seed"):
        assert name in text


# -- /server_info --------------------------------------------------------------------------


def test_baseline_max_running_requests_is_null_with_the_effective_value_inside(
    start_emulator: Start,
) -> None:
    emulator = start_emulator(*BATCH)
    with client(emulator) as http:
        info = http.get("/server_info").json()
    state = info["internal_states"][0]
    # As the real 0.5.23 server: null when not given; the scheduler's limit is elsewhere.
    assert info["max_running_requests"] is None
    # SGLang's pool size for 131072 context and 524288 KV tokens: 524288/131072*512 = 2048.
    assert state["effective_max_running_requests_per_dp"] == 2048


def test_eagle_caps_max_running_requests_at_48(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, *EAGLE3_FLAGS)
    with client(emulator) as http:
        info = http.get("/server_info").json()
    assert info["max_running_requests"] == 48
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 48
    assert "Max running requests is reset to 48" in emulator.log()


# -- batching ----------------------------------------------------------------------------------


def test_throughput_grows_with_concurrency(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH)
    generator = LoadGenerator(emulator.url, request_timeout=60)

    def throughput(concurrency: int, requests: int) -> float:
        workload = Workload(input_len=32, output_len=48, requests=requests, warmup=0)
        measurement = measure(generator.run_closed_loop(workload, concurrency))
        assert measurement.failed == 0, measurement.errors
        return measurement.output_throughput

    single = throughput(1, 4)
    batched = throughput(20, 40)
    # The model: 92 tok/s at C=1, ~540 tok/s at C=20 (x20 here); generous margin.
    assert batched > 2.5 * single
    assert single < 1.15 * 20 * 1000 / decode_ms(DEFAULT_PARAMS, 1)


def test_a_request_takes_at_least_its_model_time(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH)
    with client(emulator) as http:
        out = http.post("/generate", json=_body(64)).json()
    model = (prefill_ms(DEFAULT_PARAMS, 32) + 63 * decode_ms(DEFAULT_PARAMS, 1)) / 1000 / 20
    assert out["meta_info"]["completion_tokens"] == 64
    assert 0.97 * model < out["meta_info"]["e2e_latency"] < 3 * model + 0.2


def test_requests_beyond_max_running_requests_queue(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, "--max-running-requests", "2")
    results: list[int] = []

    def send(index: int) -> None:
        with client(emulator) as http:
            out = http.post("/generate", json=_body(1000, first=2000 + 100 * index)).json()
            results.append(out["meta_info"]["completion_tokens"])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(5)]
    seen: set[tuple[float, float]] = set()
    with client(emulator) as http:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 20
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            metrics = _metrics(http)
            seen.add((metrics["num_running_reqs"], metrics["num_queue_reqs"]))
            time.sleep(0.01)
    for thread in threads:
        thread.join(30)
    # Requests of ~0.5 s: the five are all sent well before the first two are done.
    assert results == [1000] * 5
    assert max(running for running, _ in seen) == 2  # never more than the cap
    assert any(queued >= 2 for _, queued in seen), seen


# -- speculative decoding --------------------------------------------------------------------


def test_eagle_streams_multi_token_chunks_with_consistent_verify_counts(
    start_emulator: Start,
) -> None:
    emulator = start_emulator(*BATCH, *EAGLE3_FLAGS)
    with (
        client(emulator) as http,
        http.stream("POST", "/generate", json=_body(256, stream=True)) as r,
    ):
        events = sse_json(r)
    counts = [e["meta_info"]["completion_tokens"] for e in events]
    sizes = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    # Multi-token chunks. Not their exact sizes: when the event loop falls behind (a loaded
    # machine), the writer merges pending chunks, the prefill's single token included.
    assert min(sizes) >= 1 and max(sizes) > 1 and sum(sizes) == 256
    final = events[-1]["meta_info"]
    assert final["completion_tokens"] == 256
    verify = final["spec_verify_ct"]
    # Each verify commits its accepted drafts plus the bonus token; the prefill gave one more.
    assert final["spec_num_correct_drafts"] + verify == 256 - 1
    assert 1.6 < 256 / verify < 2.5
    assert final["spec_accept_length"] == pytest.approx(256 / verify)
    assert final["spec_num_proposed_drafts"] == verify * 3
    assert sum(final["spec_correct_drafts_histogram"]) == verify


def test_scheduler_metrics_and_internal_states_follow_the_engine(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, *EAGLE3_FLAGS, "--decode-log-interval", "10")
    generator = LoadGenerator(emulator.url, request_timeout=60)
    workload = Workload(input_len=32, output_len=128, requests=8, warmup=0)
    measurement = measure(generator.run_closed_loop(workload, 4))
    assert measurement.failed == 0, measurement.errors
    assert measurement.acceptance_length is not None
    assert 1.6 < measurement.acceptance_length < 2.5
    with client(emulator) as http:
        metrics = _metrics(http)
        state = http.get("/server_info").json()["internal_states"][0]
    assert metrics["gen_throughput"] > 0
    assert 1.5 < metrics["spec_accept_length"] <= 4
    assert metrics["spec_verify_calls_total"] > 8 * 128 / 4
    assert metrics["generation_tokens_total"] >= 8 * 128
    assert metrics["time_to_first_token_seconds_count"] >= 8
    assert metrics["inter_token_latency_seconds_count"] > 0
    assert metrics["num_running_reqs"] == 0 and metrics["num_queue_reqs"] == 0
    assert state["last_gen_throughput"] > 0
    assert 1.5 < state["avg_spec_accept_length"] < 2.5
    assert "accept len: " in emulator.log()


# -- ground truth trace ----------------------------------------------------------------------


def test_trace_records_receipt_and_every_chunk(start_emulator: Start, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    emulator = start_emulator(*BATCH, "--emulator-trace", str(trace))
    before = time.time()
    with client(emulator) as http:
        for index in range(3):
            with http.stream(
                "POST", "/generate", json=_body(20, stream=True, first=5000 + index)
            ) as r:
                assert len(sse_json(r)) >= 1
    after = time.time()
    emulator.stop()
    clock, requests, summary = read_trace(trace)
    assert clock["pid"] == emulator.process.pid
    mine = [r for r in requests if r["prompt_tokens"] == 32]
    assert len(mine) == 3
    for record in mine:
        assert before < record["arrived"] <= record["http_received"]
        assert record["http_received"] <= record["received"] <= record["t"][0]
        assert record["t"][0] <= record["first_write"] < after
        assert record["t"] == sorted(record["t"])
        assert sum(record["n"]) == record["completion_tokens"] == 20
        assert record["finish"] == "length"
        assert record["peer"][0] == "127.0.0.1" and record["peer"][1] > 0
    assert summary is not None and summary["forwards"] > 0 and summary["speedup"] == 20


def test_trace_is_json_lines(start_emulator: Start, tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    emulator = start_emulator(*BATCH, "--emulator-trace", str(trace))
    emulator.stop()
    for line in trace.read_text().splitlines():
        json.loads(line)


def test_shutdown_aborts_a_running_stream(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH)
    events: list[dict[str, Any]] = []
    with (
        client(emulator) as http,
        http.stream("POST", "/generate", json=_body(100000, stream=True)) as r,
    ):
        for line in r.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:]))
                if len(events) == 3:
                    emulator.process.terminate()
    assert events[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert emulator.process.wait(10) == 0
