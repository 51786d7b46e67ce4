"""The concurrency check says whose a shortfall was, the server's or the client's, and a
shortfall alone marks a run without failing its measurement (issue 23)."""

from __future__ import annotations

from dataclasses import replace

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.budget import Budget, broken_message
from pytest_sglang.measure.checks import Check
from pytest_sglang.measure.measurement import measure
from pytest_sglang.measure.results import BenchResult

C = 4
W = Workload(input_len=4, output_len=3, requests=40, warmup=0, endpoint="completions")


def closed_loop(before: float, gap: float) -> LoadRun:
    """C slots, each sending 10 requests of 100 ms in a row: ``before`` seconds from a
    request's start to its bytes leaving, ``gap`` between a response and the next start."""
    records = []
    for slot in range(C):
        started = 0.0
        for n in range(10):
            sent = started + before
            end = sent + 0.1
            records.append(
                RequestRecord(
                    index=slot * 10 + n, warmup=False, input_len=4, output_len=3,
                    started=started, sent=sent, end=end, chunk_times=[sent + 0.05, end],
                    chunk_tokens=[2, 1], output_tokens_server=3, prompt_tokens=4,
                    finish_reason="length", status=200,
                )
            )  # fmt: skip
            started = end + gap
    return LoadRun(workload=W, load=ClosedLoop(C), records=tuple(records), started=0.0)


def test_time_before_the_bytes_leave_is_the_servers_shortfall_and_said_so() -> None:
    # A fresh connection per request: 30 ms of each request before its bytes leave.
    check = measure(closed_loop(before=0.03, gap=0.0)).check("concurrency")
    assert check.passed is False
    assert "true for the server, not a counting artefact: the client held 4.00" in check.detail
    assert "each spent 30.0 ms (median) before its bytes left, opening a connection" in (
        check.detail
    )


def test_a_client_that_dawdles_between_requests_is_named() -> None:
    check = measure(closed_loop(before=0.0, gap=0.03)).check("concurrency")
    assert check.passed is False
    assert "the client itself held only 3.15 requests open" in check.detail
    assert "its own gaps between one response and the next request" in check.detail


def test_a_realised_concurrency_says_nothing_more() -> None:
    check = measure(closed_loop(before=0.0, gap=0.0)).check("concurrency")
    assert check.passed is True
    assert "held" not in check.detail


def test_a_load_shortfall_alone_marks_the_run_without_failing_the_measurement() -> None:
    run = measure(closed_loop(before=0.03, gap=0.0))
    result = BenchResult("srv", W, C, (run,))
    assert not result.valid  # the verdicts refuse it
    assert broken_message(result, Budget()) is None
    # A check of what was measured fails it.
    wrong = replace(run, checks=(*run.checks, Check("token_counts", False, "3 disagree")))
    message = broken_message(BenchResult("srv", W, C, (wrong,)), Budget()) or ""
    assert "a validity check failed (token_counts)" in message
    assert "run 1: token_counts: 3 disagree" in message
    assert "concurrency" not in message.splitlines()[0]
    allowed = Budget(checks=frozenset({"token_counts"}))
    assert broken_message(BenchResult("srv", W, C, (wrong,)), allowed) is None
