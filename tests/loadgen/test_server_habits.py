"""The load generator against small servers with real servers' habits (``tests/servers``):
closing after every stream, usage on the finish chunk, cut streams, frozen, absent."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from pytest_sglang.loadgen.records import ConnectionHabits
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering
from pytest_sglang.loadgen.workload import Endpoint, Workload
from pytest_sglang.measure.measurement import measure
from tests.servers.process import free_port, running_server

OUTPUT_LEN = 16


def workload(endpoint: Endpoint, requests: int = 24) -> Workload:
    return Workload(input_len=8, output_len=OUTPUT_LEN, requests=requests, warmup=0,
                    endpoint=endpoint)  # fmt: skip


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
@pytest.mark.parametrize("concurrency", [1, 8, 32])
def test_close_after_every_stream_is_not_a_server_failure(
    endpoint: Endpoint, concurrency: int
) -> None:
    requests = max(24, 2 * concurrency)
    # 5 ms a token: requests long enough that a fresh connection per request (loopback,
    # ~0.2 ms) is a small part of the client's gap between one request and the next.
    with running_server("openai_like", "--close-after-stream", "--token-ms", "5") as server:
        run = LoadGenerator(server.url).run_closed_loop(workload(endpoint, requests), concurrency)
        stats = server.stats()
    m = measure(run)
    assert m.failed == 0, m.errors
    # The checks this habit could break. Not the realised concurrency: a fresh connection per
    # request makes a short run's gaps between requests, and a crowded machine lengthens
    # them, which is the client's pace, not what this test is about.
    for name in ("no_failed_requests", "tokens_counted", "output_length", "token_counts"):
        assert m.check(name).passed is True, m.check(name)
    # The server's own count of the tokens it streamed equals the client's.
    assert m.output_tokens == stats["completion_tokens"] == requests * OUTPUT_LEN
    # The stale attempts never reached the server's request handling: each request once.
    assert stats["requests"] == requests
    retried = sum(r.retries for r in run.records)
    # Dead pooled connections were met (the loop reuses a connection at once), retried once
    # each, and reuse stopped: at most one wave of retries.
    assert 1 <= retried <= concurrency, [r.error for r in run.records]
    assert m.check("connection_retries").detail.startswith(f"{retried} of {requests}")


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_a_servers_close_habit_is_learned_in_the_warm_up_and_kept_for_every_run(
    endpoint: Endpoint,
) -> None:
    # The server closes 20 ms after each stream: a pooled client reuses the connection
    # before that (a closed loop sends the next request at once), and its write goes into a
    # socket the server no longer reads. Without the habit known, every run's first
    # measured request met the warm-up's dead connection.
    habits = ConnectionHabits()
    load = Workload(input_len=8, output_len=OUTPUT_LEN, requests=6, warmup=1, endpoint=endpoint)
    with running_server("openai_like", "--close-after-stream", "--token-ms", "2") as server:
        generator = LoadGenerator(server.url, connections=habits)
        runs = [generator.run_closed_loop(load, 1, repeat=i) for i in range(3)]
        # Another generator for the same server (the next measurement) shares what was learned.
        later = LoadGenerator(server.url, connections=habits).run_closed_loop(load, 2, repeat=9)
    assert habits.closes_after_response is True, habits
    for run in [*runs, later]:
        assert [(r.error, r.retries) for r in run.measured] == [(None, 0)] * 6
    # The warm-up's probe learned it: later runs never reused a connection.
    assert all(r.retries == 0 for run in [*runs[1:], later] for r in run.records)


def test_a_server_that_keeps_connections_is_probed_once_and_reused() -> None:
    habits = ConnectionHabits()
    load = Workload(input_len=8, output_len=4, requests=4, warmup=1, endpoint="completions")
    with running_server("openai_like") as server:
        generator = LoadGenerator(server.url, connections=habits)
        generator.run_closed_loop(load, 1)
        assert habits.closes_after_response is False, habits
        generator.run_closed_loop(load, 1, repeat=1)
        stats = server.stats()
    # Run 1: its warm-up request, the probe's copy of it, 4 measured; run 2: no probe.
    assert stats["requests"] == (1 + 1 + 4) + (1 + 4)


def test_a_stream_cut_after_bytes_arrived_is_never_retried() -> None:
    with running_server("openai_like", "--cut-after", "3") as server:
        run = LoadGenerator(server.url, max_consecutive_failures=None).run_closed_loop(
            workload("completions", 4), 1
        )
        stats = server.stats()
    assert all(not r.ok and r.retries == 0 for r in run.records)
    assert stats["requests"] == 4  # each request was sent once
    assert all(r.error and r.error.startswith("response cut") for r in run.records), [
        r.error for r in run.records
    ]


def test_a_stream_cut_after_its_last_token_names_the_lost_tail() -> None:
    # The server resets the connection once every token is out, before the finish chunk,
    # usage and [DONE]: what a reset does to a server's unsent tail (benchmarks/reset_tail.py).
    with running_server("openai_like", "--cut-after", str(OUTPUT_LEN)) as server:
        run = LoadGenerator(server.url, max_consecutive_failures=None).run_closed_loop(
            workload("completions", 2), 1
        )
    for record in run.records:
        assert record.error is not None and record.error.startswith("response cut"), record
        assert f"after all {OUTPUT_LEN} requested tokens arrived" in record.error
        assert "usage, [DONE]" in record.error
    cut_early = run.records[0].error
    with running_server("openai_like", "--cut-after", "3") as server:
        run = LoadGenerator(server.url, max_consecutive_failures=None).run_closed_loop(
            workload("completions", 1), 1
        )
    assert cut_early and "requested tokens arrived" not in (run.records[0].error or "")


def test_connection_refused_is_named_and_not_retried() -> None:
    port = free_port()  # nothing listens there
    generator = LoadGenerator(f"http://127.0.0.1:{port}", max_consecutive_failures=None)
    run = generator.run_closed_loop(workload("completions", 3), 1)
    for record in run.records:
        assert record.error is not None and record.error.startswith("connection refused: ")
        assert record.retries == 0 and record.status is None
    detail = measure(run).check("no_failed_requests").detail
    assert "3 x connection refused" in detail


def test_usage_on_the_finish_chunk_counts_the_right_tokens() -> None:
    with running_server("openai_like", "--usage", "finish") as server:
        run = LoadGenerator(server.url).run_closed_loop(workload("completions", 16), 4)
        stats = server.stats()
    m = measure(run)
    for name in ("no_failed_requests", "tokens_counted", "output_length", "token_counts"):
        assert m.check(name).passed is True, m.check(name)
    assert m.output_tokens == stats["completion_tokens"]
    # One gap per token after the first: the usage chunk adds no gap (a timing-free check;
    # under load several events can arrive in one read, so gaps of ~0 are real).
    assert m.itl is not None and m.itl.count == 16 * (OUTPUT_LEN - 1)


def test_text_with_no_countable_tokens_makes_the_run_invalid() -> None:
    with running_server("openai_like", "--stuck-usage", "--usage", "running") as server:
        run = LoadGenerator(server.url).run_closed_loop(workload("completions", 4), 2)
    m = measure(run)
    assert m.check("tokens_counted").passed is False
    assert not m.valid


def test_a_frozen_server_ends_the_run_with_a_clear_message() -> None:
    generator = LoadGenerator(
        "http://127.0.0.1:1",  # replaced below
        first_token_timeout=1.0,
        stall_timeout=1.0,
        max_consecutive_failures=4,
    )
    with running_server("openai_like", "--token-ms", "20") as server:
        generator.url = server.url
        os.kill(server.process.pid, signal.SIGSTOP)
        began = time.monotonic()
        with pytest.raises(ServerStoppedAnswering) as caught:
            generator.run_closed_loop(workload("completions", 40), 2)
        elapsed = time.monotonic() - began
    message = str(caught.value)
    assert message.startswith("the server stopped answering: 4 consecutive transport failures")
    assert "timed out waiting for the first token" in message
    # The 4th failure stops the run; a request taken by a worker freed a moment before is
    # the most that can have gone out after it.
    sent = len(caught.value.run.records)  # no record made up for the unsent ones
    assert 4 <= sent <= 4 + 2
    assert caught.value.unsent == 40 - sent
    assert f"{40 - sent} of 40 requests not sent ({sent} sent)" in message
    assert elapsed < 10


HABIT_SUITE = """
from pytest_sglang import Workload

W = Workload(input_len=8, output_len=16, requests=8, warmup=1, endpoint="completions")

def test_runs(sglang_bench):
    sglang_bench("closer", W, concurrency=1, repeats=3)

def test_another_measurement(sglang_bench):
    sglang_bench("closer", W, concurrency=2, repeats=2)
"""


def test_the_bench_learns_a_servers_habit_once_per_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HABIT_SUITE)
    with running_server("openai_like", "--close-after-stream", "--token-ms", "2") as server:
        result = pytester.runpytest(
            f"--sglang-url=closer=openai+{server.url}", "--sglang-report=r.json"
        )
    result.assert_outcomes(passed=2)
    report = json.loads((pytester.path / "r.json").read_text())
    details = [
        check["detail"]
        for measurement in report["measurements"]
        for run in measurement["runs"]
        for check in run["checks"]
        if check["name"] == "connection_retries"
    ]
    # No measured request of any run met a connection the server had closed.
    assert details == ["no request needed a fresh connection"] * 5
