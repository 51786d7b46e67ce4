from __future__ import annotations

import pytest

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.slo import Objective, Slo, attainment, goodput


def rec(
    ttft: float, *, gaps: tuple[float, ...] = (0.01, 0.01), error: str | None = None
) -> RequestRecord:
    times = [ttft]
    for gap in gaps:
        times.append(times[-1] + gap)
    return RequestRecord(
        index=0, warmup=False, input_len=4, output_len=len(times), sent=0.0, end=times[-1],
        chunk_times=times, chunk_tokens=[1] * len(times), output_tokens_server=len(times),
        error=error,
    )  # fmt: skip


def test_parse_reads_percentiles_units_and_several_objectives() -> None:
    slo = Slo.parse("ttft.p99 <= 2s, tpot.p90<=50ms, e2e_latency.p99.9 <= 3000ms")
    assert slo.objectives == (
        Objective("ttft", 2.0, 99.0),
        Objective("tpot", 0.05, 90.0),
        Objective("e2e_latency", 3.0, 99.9),
    )
    assert slo.describe() == (
        "ttft.p99 <= 2000 ms and tpot.p90 <= 50 ms and e2e_latency.p99.9 <= 3000 ms"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft < 2s", "is not an objective"),
        ("throughput.p99 <= 2s", "use one of ttft, tpot, itl, e2e_latency"),
        ("ttft.p100 <= 2s", "between 0 and 100"),
        ("ttft.p99 <= 0s", "must be > 0"),
        ("ttft.p99 <= 1s, ttft.p90 <= 2s", "each metric once"),
    ],
)
def test_parse_errors_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Slo.parse(text)


def test_each_request_is_judged_on_its_own_value() -> None:
    slo = Slo.parse("ttft.p99 <= 1s, itl.p99 <= 20ms")
    good = rec(0.5)
    slow_first = rec(1.5)
    stalled = rec(0.5, gaps=(0.01, 0.05))  # one 50 ms gap per token: a stall
    failed = rec(0.1, error="HTTP 500")
    counts = attainment(slo, [good, slow_first, stalled, failed])
    assert [(a.met, a.requests) for a in counts] == [(2, 4), (2, 4)]
    assert [slo.met_by(r) for r in (good, slow_first, stalled, failed)] == [
        True, False, False, False,
    ]  # fmt: skip


def test_goodput_counts_requests_meeting_every_objective_per_second() -> None:
    slo = Slo.parse("ttft.p50 <= 1s")
    records = [rec(0.5), rec(0.7), rec(2.0), rec(0.1, error="reset")]
    assert goodput(slo, records, duration=4.0) == pytest.approx(0.5)
    assert goodput(slo, records, duration=0.0) == 0.0
