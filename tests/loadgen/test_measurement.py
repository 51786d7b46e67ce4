"""Metric math on synthetic records with hand-computed expected values."""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import asdict

import pytest

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Distribution, Measurement, measure
from pytest_sglang.measure.metrics import METRICS
from pytest_sglang.measure.metrics import percentile as _percentile

W = Workload(input_len=4, output_len=3, requests=3, warmup=1)


def rec(
    index: int,
    sent: float,
    end: float,
    chunks: list[tuple[float, int]] | None = None,
    *,
    warmup: bool = False,
    error: str | None = None,
    server: int | None = None,
    client: int | None = None,
    prompt: int | None = 4,
    spec: int | None = None,
    exact: bool = True,
    scheduled: float | None = None,
) -> RequestRecord:
    chunks = chunks or []
    return RequestRecord(
        index=index,
        warmup=warmup,
        input_len=4,
        output_len=3,
        sent=sent,
        scheduled=scheduled,
        end=end,
        chunk_times=[t for t, _ in chunks],
        chunk_tokens=[n for _, n in chunks],
        chunk_tokens_exact=exact,
        output_tokens_server=server,
        output_tokens_client=client,
        prompt_tokens=prompt,
        spec_verify_ct=spec,
        finish_reason=None if error else "length",
        status=500 if error else 200,
        error=error,
    )


RECORDS = (
    rec(0, 9.0, 9.5, [(9.2, 3)], warmup=True, server=3, client=3),
    rec(0, 10.0, 10.8, [(10.5, 1), (10.7, 2)], server=3, client=3, spec=2),
    rec(1, 10.0, 10.6, [(10.2, 1), (10.4, 1), (10.6, 1)], server=3, client=3, spec=1),
    rec(2, 10.6, 10.7, error="HTTP 500: boom"),
)
RUN = LoadRun(workload=W, load=ClosedLoop(2), records=RECORDS, started=9.0)


def test_hand_computed_metrics() -> None:
    m = measure(RUN)
    approx = pytest.approx
    assert (m.requests, m.completed, m.failed) == (3, 2, 1)
    # Window: first measured send 10.0 -> last measured end 10.8 (warm-up excluded).
    assert m.duration == approx(0.8)
    assert (m.output_tokens, m.input_tokens) == (6, 8)
    assert m.output_throughput == approx(6 / 0.8)
    assert m.total_throughput == approx(14 / 0.8)
    assert m.request_throughput == approx(2 / 0.8)
    # TTFT 0.5 and 0.2: linear interpolation between the two.
    assert m.ttft is not None
    assert (m.ttft.count, m.ttft.mean, m.ttft.p50, m.ttft.p90, m.ttft.p99) == (
        2,
        approx(0.35),
        approx(0.35),
        approx(0.47),
        approx(0.497),
    )
    # Per-token ITL: 0.2 s / 2 tokens counted twice, then 0.2 and 0.2: [.1, .1, .2, .2].
    assert m.itl is not None
    assert (m.itl.count, m.itl.mean, m.itl.p50, m.itl.p90, m.itl.min, m.itl.max) == (
        4,
        approx(0.15),
        approx(0.15),
        approx(0.2),
        approx(0.1),
        approx(0.2),
    )
    # Per-chunk ITL: three gaps of 0.2 s.
    assert m.itl_chunk is not None
    assert (m.itl_chunk.count, m.itl_chunk.mean, m.itl_chunk.p99) == (3, approx(0.2), approx(0.2))
    # TPOT: (0.8 - 0.5) / 2 and (0.6 - 0.2) / 2.
    assert m.tpot is not None
    assert (m.tpot.mean, m.tpot.min, m.tpot.max) == (approx(0.175), approx(0.15), approx(0.2))
    assert m.e2e_latency is not None
    assert (m.e2e_latency.count, m.e2e_latency.mean) == (2, approx(0.7))
    # Acceptance: (3 + 3) / (2 + 1).
    assert m.acceptance_length == approx(2.0)
    # In flight: (0.8 + 0.6 + 0.1) / 0.8, the failed request included.
    assert m.realised_concurrency == approx(1.875)
    assert m.errors == (("HTTP 500: boom", 1),)
    assert len(m.records) == 3 and len(m.warmup_records) == 1


def test_checks_and_validity() -> None:
    m = measure(RUN)
    verdicts = {c.name: c.passed for c in m.checks}
    assert verdicts == {
        "no_failed_requests": False,
        "tokens_counted": True,
        "output_length": True,
        "token_counts": True,
        "input_length": True,
        "concurrency": True,
        "chunk_token_counts": True,
        "connection_retries": True,
        "client_bound": None,  # a recorded run: the client was not watched
    }
    assert not m.valid
    assert "1 of 3 measured requests failed: 1 x HTTP 500 (e.g. request 2: HTTP 500: boom)" in (
        m.check("no_failed_requests").detail
    )
    ok = LoadRun(workload=W, load=ClosedLoop(2), records=RECORDS[:3], started=9.0)
    assert measure(ok).valid


def test_get_by_name() -> None:
    m = measure(RUN)
    assert m.get("output_throughput") == pytest.approx(7.5)
    assert m.get("ttft") == pytest.approx(0.35)
    assert m.get("ttft.p90") == pytest.approx(0.47)
    assert m.get("acceptance_length") == pytest.approx(2.0)
    with pytest.raises(KeyError, match="unknown metric 'tok_s'"):
        m.get("tok_s")
    with pytest.raises(KeyError, match="unknown statistic"):
        m.get("output_throughput.p50")


def test_no_speculation_gives_no_acceptance_length() -> None:
    records = [rec(0, 0.0, 1.0, [(0.5, 3)], server=3, client=3, spec=0)]
    m = measure(LoadRun(workload=W, load=ClosedLoop(1), records=tuple(records), started=0.0))
    assert m.acceptance_length is None
    assert m.get("acceptance_length") is None


def test_wrong_lengths_and_disagreeing_counts_fail_their_checks() -> None:
    records = (
        rec(0, 0.0, 1.0, [(0.5, 1), (0.9, 1)], server=2, client=2),
        rec(1, 0.0, 1.0, [(0.5, 1), (0.9, 2)], server=3, client=4),
    )
    m = measure(LoadRun(workload=W, load=ClosedLoop(2), records=records, started=0.0))
    assert m.check("output_length").passed is False
    assert "request 0: 2" in m.check("output_length").detail
    assert m.check("token_counts").passed is False
    assert "request 1: client 4, server 3" in m.check("token_counts").detail


def test_chat_input_length_is_reported_not_judged() -> None:
    chat = Workload(input_len=4, output_len=3, requests=1, endpoint="chat")
    records = (rec(0, 0.0, 1.0, [(0.5, 3)], server=3, prompt=17),)
    m = measure(LoadRun(workload=chat, load=ClosedLoop(1), records=records, started=0.0))
    check = m.check("input_length")
    assert check.passed is None and "17.0 prompt tokens" in check.detail and "+13.0" in check.detail


def test_spread_chunk_counts_are_flagged_not_failed() -> None:
    records = (rec(0, 0.0, 1.0, [(0.5, 1), (0.9, 2)], server=3, exact=False),)
    m = measure(LoadRun(workload=W, load=ClosedLoop(1), records=records, started=0.0))
    assert m.check("chunk_token_counts").passed is None
    assert m.valid


def sequential(count: int, duration: float, lanes: int) -> tuple[RequestRecord, ...]:
    """``count`` requests of ``duration`` seconds, ``lanes`` of them in flight at a time."""
    return tuple(
        rec(i, (i // lanes) * duration, (i // lanes + 1) * duration, [(0.0, 3)], server=3)
        for i in range(count)
    )


def test_concurrency_check_passes_a_full_pipeline_and_fails_idle_slots() -> None:
    full = LoadRun(workload=W, load=ClosedLoop(2), records=sequential(10, 1.0, 2), started=0.0)
    assert measure(full).realised_concurrency == pytest.approx(2.0)
    assert measure(full).check("concurrency").passed is True
    # The client claimed 2 in flight but sent one at a time: realised 1.0, floor 1.71.
    idle = LoadRun(workload=W, load=ClosedLoop(2), records=sequential(10, 1.0, 1), started=0.0)
    check = measure(idle).check("concurrency")
    assert check.passed is False
    assert "realised 1.00 for 2 requested; allowed [1.71, 2]" in check.detail


def test_open_loop_schedule_check() -> None:
    on_time = tuple(
        rec(i, i + 0.001, i + 0.5, [(i + 0.2, 3)], server=3, scheduled=float(i)) for i in range(5)
    )
    late = (*on_time[:4], rec(4, 4.3, 4.8, [(4.5, 3)], server=3, scheduled=4.0))
    for records, passed in ((on_time, True), (late, False)):
        run = LoadRun(workload=W, load=OpenLoop(1.0, "constant"), records=records, started=0.0)
        m = measure(run)
        assert m.check("schedule").passed is passed
        assert "concurrency" not in {c.name for c in m.checks}
    assert "300.0 ms (allowed 150.0 ms at 1 requests/s)" in m.check("schedule").detail


def test_all_failed() -> None:
    records = tuple(rec(i, 1.0, 1.0, error="ConnectError: refused", prompt=None) for i in range(3))
    m = measure(LoadRun(workload=W, load=ClosedLoop(3), records=records, started=0.0))
    assert (m.completed, m.failed, m.output_throughput, m.duration) == (0, 3, 0.0, 0.0)
    assert m.ttft is None and m.itl is None and m.get("ttft.p99") is None
    assert m.errors == (("ConnectError: refused", 3),)
    assert not m.valid


def test_as_dict_is_json_and_round_trips() -> None:
    m = measure(RUN)
    data = json.loads(json.dumps(m.as_dict(include_records=True)))
    assert data["valid"] is False
    assert data["records"][0]["sent"] == 0.0 and data["records"][0]["end"] == pytest.approx(0.8)
    assert data["warmup_records"][0]["sent"] == pytest.approx(-1.0)
    back = Measurement.from_dict(data)
    assert back == m  # records are not compared...
    assert len(back.records) == 3 and back.records[0].chunk_tokens == [1, 2]  # ...but kept
    light = Measurement.from_dict(json.loads(json.dumps(m.as_dict())))
    assert light == m and light.records == ()


def test_every_metric_field_is_in_the_vocabulary() -> None:
    m = measure(RUN)
    for name in METRICS:
        m.get(name)  # raises for a name the measurement does not have


@pytest.mark.parametrize("size", [1, 2, 3, 10, 101])
def test_percentile_matches_linear_interpolation(size: int) -> None:
    rng = random.Random(size)
    data = sorted(rng.random() for _ in range(size))
    if size >= 2:
        cuts = statistics.quantiles(data, n=100, method="inclusive")
        for q in (50, 90, 99):
            assert _percentile(data, q) == pytest.approx(cuts[q - 1])
    assert _percentile(data, 0) == data[0] and _percentile(data, 100) == data[-1]


def test_weighted_distribution_equals_the_expanded_one() -> None:
    rng = random.Random(1)
    values = [rng.random() for _ in range(40)]
    weights = [rng.randint(1, 4) for _ in range(40)]
    expanded = [v for v, w in zip(values, weights, strict=True) for _ in range(w)]
    weighted, plain = Distribution.weighted(values, weights), Distribution.of(expanded)
    assert weighted is not None and plain is not None
    assert asdict(weighted) == pytest.approx(asdict(plain))
    assert Distribution.weighted([], []) is None and Distribution.of([]) is None
