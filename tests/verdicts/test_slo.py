from __future__ import annotations

import dataclasses
import math

import pytest
from scipy import stats as scipy_stats

from pytest_sglang.errors import Inconclusive, PerformanceAssertionError
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.results import BenchResult
from pytest_sglang.measure.slo import Slo
from pytest_sglang.verdicts.decision import Outcome
from pytest_sglang.verdicts.slo import assert_slo, judge_slo, requests_to_pass
from pytest_sglang.verdicts.stats import binomial_bounds
from tests.bench_data import result
from tests.measure.test_slo import rec


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (290, 300), (999, 1000), (1, 1)])
@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_binomial_bounds_are_clopper_pearson(k: int, n: int, alpha: float) -> None:
    lower, upper = binomial_bounds(k, n, alpha)
    expected_lower = 0.0 if k == 0 else scipy_stats.beta.ppf(alpha, k, n - k + 1)
    expected_upper = 1.0 if k == n else scipy_stats.beta.ppf(1 - alpha, k + 1, n - k)
    assert lower == pytest.approx(expected_lower, abs=1e-9)
    assert upper == pytest.approx(expected_upper, abs=1e-9)


def test_requests_to_pass_is_the_least_n_whose_clean_run_passes() -> None:
    n = requests_to_pass(99, 0.05)
    assert n == 299
    assert binomial_bounds(n, n, 0.05)[0] >= 0.99 > binomial_bounds(n - 1, n - 1, 0.05)[0]


def test_judge_passes_fails_and_cannot_decide() -> None:
    slo = Slo.parse("ttft.p90 <= 1s")
    clean = [rec(0.5)] * 100
    assert judge_slo(slo, clean)[0] is Outcome.PASS
    half = [rec(0.5)] * 50 + [rec(2.0)] * 50
    assert judge_slo(slo, half)[0] is Outcome.FAIL
    few = [rec(0.5)] * 10
    assert judge_slo(slo, few)[0] is Outcome.INCONCLUSIVE


def test_objectives_share_alpha_bonferroni() -> None:
    slo = Slo.parse("ttft.p90 <= 1s, e2e_latency.p90 <= 9s")
    _, decisions = judge_slo(slo, [rec(0.5)] * 100, alpha=0.05)
    assert [d.alpha for d in decisions] == [0.025, 0.025]


def result_with(records_per_run: list[list[RequestRecord]]) -> BenchResult:
    template = result("baseline", [100.0] * len(records_per_run))
    runs = tuple(
        dataclasses.replace(run, records=tuple(records), duration=10.0)
        for run, records in zip(template.runs, records_per_run, strict=True)
    )
    return dataclasses.replace(template, runs=runs)


def test_assert_slo_pools_runs_and_raises_with_a_table() -> None:
    passing = result_with([[rec(0.2)] * 200, [rec(0.3)] * 200])
    verdict = assert_slo(passing, "ttft.p99 <= 1s")
    assert verdict.outcome is Outcome.PASS
    assert "400 requests in 2 runs" in verdict.table
    assert verdict.evidence["goodput"] == [20.0, 20.0]

    with pytest.raises(PerformanceAssertionError, match="FAIL") as failed:
        assert_slo(result_with([[rec(0.2)] * 90 + [rec(3.0)] * 10]), "ttft.p99 <= 1s")
    assert "90/100" in str(failed.value)

    with pytest.raises(Inconclusive, match="needs at least 299 requests"):
        assert_slo(result_with([[rec(0.2)] * 50]), "ttft.p99 <= 1s")


def test_assert_slo_counts_failed_requests_as_misses() -> None:
    records = [rec(0.2)] * 95 + [rec(0.1, error="HTTP 500")] * 5
    _, decisions = judge_slo(Slo.parse("ttft.p99 <= 1s"), records)
    assert decisions[0].met == 95
    assert math.isclose(decisions[0].fraction, 0.95)
