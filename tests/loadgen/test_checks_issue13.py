"""Validity checks for what real servers do: uncounted tokens, error kinds, retries."""

from __future__ import annotations

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.checks import failure_kinds
from pytest_sglang.measure.measurement import measure

W = Workload(input_len=4, output_len=3, requests=4, warmup=0, endpoint="completions")


def done(index: int, *, server: int | None = 3, chunks: list[int] | None = None,
         retries: int = 0) -> RequestRecord:  # fmt: skip
    chunks = [1, 1, 1] if chunks is None else chunks
    return RequestRecord(
        index=index, warmup=False, input_len=4, output_len=3, sent=10.0 + index,
        end=11.0 + index, chunk_times=[10.5 + index + 0.1 * i for i in range(len(chunks))],
        chunk_tokens=chunks, output_tokens_server=server, prompt_tokens=4,
        finish_reason="length", status=200, retries=retries,
    )  # fmt: skip


def failed(index: int, error: str) -> RequestRecord:
    return RequestRecord(index=index, warmup=False, input_len=4, output_len=3, sent=10.0,
                         end=10.5, error=error)  # fmt: skip


def run(*records: RequestRecord) -> LoadRun:
    return LoadRun(workload=W, load=ClosedLoop(1), records=records, started=9.0)


def test_text_with_no_countable_tokens_makes_the_run_invalid() -> None:
    # The stream delivered text (chunks) but no count: server None, client None.
    m = measure(run(*(done(i, server=None) for i in range(4))))
    check = m.check("tokens_counted")
    assert check.passed is False
    assert "4 of 4 completed requests counted no generated tokens" in check.detail
    assert not m.valid


def test_a_running_count_that_never_rises_makes_the_run_invalid() -> None:
    m = measure(run(*(done(i, server=3, chunks=[]) for i in range(4))))
    assert m.check("tokens_counted").passed is False
    assert not m.valid


def test_counted_tokens_pass() -> None:
    m = measure(run(*(done(i) for i in range(4))))
    assert m.check("tokens_counted").passed is True
    assert m.valid


def test_failed_requests_check_lists_the_top_error_kinds_with_counts() -> None:
    records = [
        failed(0, "connection refused: cannot connect to 127.0.0.1:1 (ECONNREFUSED)"),
        failed(1, "HTTP 503: overloaded"),
        failed(2, "connection refused: cannot connect to 127.0.0.1:1 (ECONNREFUSED)"),
        failed(3, "timed out waiting for the first token: no token for 90 s"),
    ]
    detail = measure(run(*records)).check("no_failed_requests").detail
    assert detail.startswith("4 of 4 measured requests failed: 2 x connection refused (e.g.")
    assert "1 x HTTP 503 (e.g. request 1: HTTP 503: overloaded)" in detail
    assert "1 x timed out waiting for the first token" in detail


def test_error_kind_is_the_head_of_the_message() -> None:
    long = "stream ended before 'data: [DONE]' after 3 events"
    messages = ["HTTP 500: boom", "stale connection: x", long, "HTTP 500: again"]
    assert failure_kinds([done(0), *(failed(i, m) for i, m in enumerate(messages, 1))]) == [
        "  failures by kind (the server's answer quoted):",
        "    2 x HTTP 500: boom",
        "    1 x stale connection: x",
        f"    1 x {long[:60]}: {long}",
    ]


def test_retries_are_counted_and_are_not_failures() -> None:
    m = measure(run(done(0), done(1, retries=1), done(2, retries=1), done(3)))
    check = m.check("connection_retries")
    assert check.passed is True
    assert check.detail.startswith("2 of 4 measured requests failed on a reused connection")
    assert m.valid and m.failed == 0


def test_record_retries_round_trip_and_old_dicts_load() -> None:
    record = done(0, retries=1)
    assert RequestRecord.from_dict(record.as_dict()).retries == 1
    old = record.as_dict()
    del old["retries"]
    assert RequestRecord.from_dict(old).retries == 0
