"""The TTFT split (queue, prefill, rest) from the server's meta_info timings."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from types import SimpleNamespace

import pytest

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.streams import StreamParser
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.breakdown import breakdown_summary, split_ttft, summary_line
from pytest_sglang.measure.measurement import measure
from pytest_sglang.report.summary import breakdown_lines, render_markdown, render_tables
from pytest_sglang.testing import EmulatorProcess

T0 = 1_800_000_000.0  # a server wall-clock origin
# Differences of wall-clock timestamps near 1.8e9 are exact to about 0.24 microseconds.
close = partial(math.isclose, abs_tol=1e-6)


def record(ttft: float, queue: float, prefill: float, server: float | None = None) -> RequestRecord:
    times = {
        "queue_time": queue,
        "forward_entry_time": T0 + 0.010 + queue,
        "prefill_finished_time": T0 + 0.010 + queue + prefill,
    }
    if server is not None:
        times.update(request_received_ts=T0, response_sent_to_client_ts=T0 + server)
    return RequestRecord(index=0, warmup=False, input_len=8, output_len=2, sent=10.0,
                         end=10.0 + ttft + 0.01, chunk_times=[10.0 + ttft, 10.0 + ttft + 0.01],
                         chunk_tokens=[1, 1], server_times=times)  # fmt: skip


def test_a_request_splits_into_queue_prefill_and_rest() -> None:
    split = split_ttft(record(ttft=0.050, queue=0.005, prefill=0.030, server=0.045))
    assert split is not None
    assert close(split.queue, 0.005) and close(split.prefill, 0.030)
    assert close(split.rest, 0.015)
    assert close(split.queue + split.prefill + split.rest, split.ttft)
    # The rest splits into the server's own other work and the transport to the client.
    assert split.server_other is not None and close(split.server_other, 0.010)
    assert split.transport is not None and close(split.transport, 0.005)


def test_no_split_without_the_servers_timings() -> None:
    plain = record(0.05, 0.0, 0.01)
    plain.server_times = None
    assert split_ttft(plain) is None
    assert breakdown_summary([SimpleNamespace(records=[plain])]) is None
    failed = record(0.05, 0.0, 0.01)
    failed.error = "boom"
    assert split_ttft(failed) is None


def test_a_run_breakdown() -> None:
    records = [record(0.040 + i / 1000, 0.002, 0.020, server=0.030) for i in range(10)]
    untimed = record(0.05, 0.0, 0.01)
    untimed.server_times = None
    summary = breakdown_summary([SimpleNamespace(records=[*records, untimed])])
    assert summary is not None
    assert (summary["runs"], summary["of_runs"], summary["split"], summary["requests"]) == (
        1,
        1,
        10,
        11,
    )
    assert close(summary["queue"]["p50"], 0.002) and close(summary["prefill"]["p50"], 0.020)
    assert close(summary["ttft"]["p50"], 0.0445) and close(summary["rest"]["p50"], 0.0225)
    assert close(summary["ttft"]["p99"], 0.04891) and close(summary["transport"]["p50"], 0.0145)
    assert summary_line(summary) == (
        "TTFT p50 44.5 ms = queue 2.0 + prefill 20.0 + rest 22.5 ms (rest = server 8.0 + "
        "transport/client 14.5); medians over 1 runs"
    )


def test_the_stream_parser_keeps_the_servers_timings() -> None:
    record_ = RequestRecord(index=0, warmup=False, input_len=3, output_len=2)
    parser = StreamParser("generate", record_)
    first = (b'data: {"text":"a","output_ids":[1],"meta_info":{"id":"x","finish_reason":null,'
             b'"prompt_tokens":3,"queue_time":0.25,"forward_entry_time":100.0,'
             b'"prefill_finished_time":100.5,"completion_tokens":1,'
             b'"response_sent_to_client_ts":100.6}}\n\n')  # fmt: skip
    final = (b'data: {"text":"a b","output_ids":[1,2],"meta_info":{"id":"x","finish_reason":'
             b'{"type":"length","length":2},"prompt_tokens":3,"queue_time":0.25,'
             b'"completion_tokens":2,"request_received_ts":99.0,"e2e_latency":2.0}}\n\n'
             b"data: [DONE]\n\n")  # fmt: skip
    parser.feed(first, 1.0)
    parser.feed(final, 2.0)
    parser.finish(2.0)
    assert record_.error is None
    assert record_.server_times == {
        "queue_time": 0.25, "forward_entry_time": 100.0, "prefill_finished_time": 100.5,
        "response_sent_to_client_ts": 100.6, "request_received_ts": 99.0, "e2e_latency": 2.0,
    }  # fmt: skip
    body = RequestRecord(index=0, warmup=False, input_len=3, output_len=2)
    answer = (b'{"text":"a","output_ids":[1],"meta_info":{"finish_reason":'
              b'{"type":"length","length":1},"completion_tokens":1,"queue_time":0.1}}')  # fmt: skip
    StreamParser("generate", body).whole(answer)
    assert body.server_times == {"queue_time": 0.1}


@pytest.mark.timeout(120)
def test_against_the_emulator_the_parts_add_up(
    start_emulator: Callable[..., EmulatorProcess],
) -> None:
    emulator = start_emulator("--enable-metrics", "--emulator-decode-ms", "5")
    workload = Workload(input_len=16, output_len=4, requests=12, warmup=2)
    run = LoadGenerator(emulator.url).run_closed_loop(workload, 3)
    measurement = measure(run)
    summary = breakdown_summary([measurement])
    assert summary is not None and summary["runs"] == 1
    assert summary["split"] == summary["requests"] == 12
    splits = [s for s in map(split_ttft, measurement.records) if s is not None]
    assert all(abs(s.queue + s.prefill + s.rest - s.ttft) <= 0.001 for s in splits)
    assert summary["prefill"]["p50"] > 0 and summary["queue"]["p50"] >= 0
    assert summary_line(summary).startswith("TTFT p50 ")


def test_the_report_shows_the_split_of_a_verdicts_servers() -> None:
    split = {"ttft": {"p50": 0.050, "p99": 0.080}, "queue": {"p50": 0.001, "p99": 0.004},
             "prefill": {"p50": 0.030, "p99": 0.050}, "rest": {"p50": 0.019, "p99": 0.026},
             "runs": 2}  # fmt: skip
    verdict = {"test": "t.py::test_x", "kind": "assert_at_most", "outcome": "pass",
               "metric": "ttft.p50", "summary": "PASS: ttft.p50", "warnings": [],
               "evidence": {"ttft_breakdown": {"real": split}}, "table": "t"}  # fmt: skip
    (line,) = breakdown_lines(verdict["evidence"])  # type: ignore[arg-type]
    assert line == (
        "TTFT split, real: p50 50.0 ms = queue 1.0 + prefill 30.0 + rest 19.0; p99 80.0 ms = "
        "queue 4.0 + prefill 50.0 + rest 26.0 ms (queue and prefill as the server reports them)"
    )
    assert f"    {line}" in render_tables([], [verdict])  # type: ignore[list-item]
    assert line in render_markdown([], [verdict])  # type: ignore[list-item]
