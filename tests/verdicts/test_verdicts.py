"""Verdicts on synthetic results: outcomes, refusals, confounders, tables, crossover."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pytest_sglang import (
    Inconclusive,
    PerformanceAssertionError,
    Workload,
    assert_at_least,
    assert_at_most,
    assert_faster,
    estimate_break_even,
    find_crossover,
)
from pytest_sglang.errors import ComparisonRefused
from pytest_sglang.verdicts.specdecode import break_even_accept_length
from tests.bench_data import SPEC_CONFIG, result, sweep

FAST = [110.0, 111.0, 112.5, 113.0, 114.2]
SLOW = [100.0, 101.0, 102.5, 103.0, 104.1]


def test_pass_returns_the_verdict() -> None:
    verdict = assert_faster(result("eagle3", FAST), result("baseline", SLOW))
    assert verdict.passed
    assert verdict.evidence["comparison"]["ratio"] > 1.05


def test_fail_shows_the_table() -> None:
    with pytest.raises(PerformanceAssertionError) as info:
        assert_faster(result("eagle3", SLOW), result("baseline", FAST))
    message = str(info.value)
    assert message.startswith("assert_faster(eagle3 @ C=1, baseline @ C=1): FAIL")
    for text in (
        "100",
        "114.2",
        "median",
        "Hodges-Lehmann",
        "exact Mann-Whitney p",
        "workload: generate, input 32 / output 4 tokens",
        "baseline: model_path=org/model",
    ):
        assert text in message  # fmt: skip
    assert info.value.verdict is not None


def test_by_ratio_is_required() -> None:
    # 10% faster does not show 20% faster: the bound cannot clear 1.2.
    with pytest.raises(PerformanceAssertionError):
        assert_faster(result("eagle3", FAST), result("baseline", SLOW), by=1.2)


def test_noise_larger_than_the_difference_is_inconclusive() -> None:
    a = [100.0, 130.0, 90.0, 125.0, 95.0]
    b = [105.0, 92.0, 128.0, 98.0, 110.0]
    with pytest.raises(Inconclusive) as info:
        assert_faster(result("eagle3", a), result("baseline", b))
    assert "INCONCLUSIVE" in str(info.value)
    assert "smallest detectable effect" in str(info.value)
    assert not isinstance(info.value, PerformanceAssertionError)


def test_latency_metrics_are_smaller_is_better() -> None:
    quick = result("eagle3", FAST, ttft=[0.050, 0.051, 0.052, 0.050, 0.049])
    slow = result("baseline", SLOW, ttft=[0.080, 0.081, 0.082, 0.079, 0.083])
    assert assert_faster(quick, slow, metric="ttft.p50").passed
    with pytest.raises(PerformanceAssertionError, match="smaller is better"):
        assert_faster(slow, quick, metric="ttft.p50")


def test_refuses_different_workloads_invalid_runs_and_too_few_runs() -> None:
    other = Workload(input_len=64, output_len=4, requests=2, warmup=0)
    with pytest.raises(ComparisonRefused, match="the workloads differ"):
        assert_faster(result("a", FAST, workload=other), result("b", SLOW))
    with pytest.raises(ComparisonRefused, match="3 of 64 requests were short"):
        assert_faster(result("a", FAST, invalid=True), result("b", SLOW))
    with pytest.raises(ComparisonRefused, match="at least 3 runs"):
        assert_faster(result("a", FAST[:2]), result("b", SLOW[:2]))
    with pytest.raises(ComparisonRefused, match="no better direction"):
        assert_faster(result("a", FAST), result("b", SLOW), metric="realised_concurrency")


def test_eagle_cap_is_flagged_above_48_only() -> None:
    spec = result("eagle3", SLOW, config=SPEC_CONFIG, concurrency=250)
    base = result("baseline", FAST, concurrency=250)
    with pytest.raises(PerformanceAssertionError) as info:
        assert_faster(spec, base)
    assert "C=250: eagle3 runs at most 48 requests at once" in str(info.value)
    verdict = assert_faster(result("eagle3", FAST, config=SPEC_CONFIG), result("baseline", SLOW))
    assert not any("max_running_requests" in w for w in verdict.warnings)


def test_different_models_are_flagged() -> None:
    config = {"model_path": "other/model", "tp_size": 4, "context_length": 262144}
    verdict = assert_faster(result("a", FAST, config=config), result("b", SLOW))
    assert any("different models" in w for w in verdict.warnings)
    assert any("tensor-parallel sizes" in w for w in verdict.warnings)


def test_absolute_gates_use_the_median_bounds() -> None:
    base = result("baseline", [700.0, 720.0, 710.0, 730.0, 715.0])
    assert assert_at_least(base, "output_throughput", 690).passed
    with pytest.raises(PerformanceAssertionError):
        assert_at_least(base, "output_throughput", 800)
    with pytest.raises(Inconclusive, match="between the bounds"):
        assert_at_least(base, "output_throughput", 712)
    quick = result("x", FAST, ttft=[0.050, 0.051, 0.052, 0.050, 0.049])
    assert assert_at_most(quick, "ttft.p50", 0.06).passed
    with pytest.raises(PerformanceAssertionError):
        assert_at_most(quick, "ttft.p50", 0.04)
    with pytest.raises(ComparisonRefused, match="at least 5 runs"):
        assert_at_least(result("x", FAST[:4]), "output_throughput", 1)


def test_crossover_found_and_compared_with_numbers() -> None:
    spec = sweep("eagle3", {1: FAST, 10: SLOW, 100: SLOW})
    base = sweep("baseline", {1: SLOW, 10: FAST, 100: FAST})
    found = find_crossover(spec, base)
    assert found.level == 10
    assert found <= 10 and not found < 10 and found > 5
    assert found == 10 and found != 100 and not found == None  # noqa: E711
    assert "<- crossover" in found.table()
    never = find_crossover(sweep("e", {1: FAST, 10: FAST}), sweep("b", {1: SLOW, 10: SLOW}))
    assert never.level is None and not (never <= 1000) and never == None  # noqa: E711
    with pytest.raises(ComparisonRefused, match="different levels"):
        find_crossover(sweep("e", {1: FAST}), sweep("b", {2: SLOW}))


def test_a_sweep_built_out_of_order_or_empty_is_refused() -> None:
    # Sweeps a user builds by hand: the crossover is the lowest level, so the order matters.
    spec, base = sweep("e", {1: FAST, 10: SLOW}), sweep("b", {1: SLOW, 10: FAST})
    backwards = [replace(s, points=s.points[::-1]) for s in (spec, base)]
    empty = [replace(s, points=()) for s in (spec, base)]
    with pytest.raises(ComparisonRefused, match=r"levels \(10, 1\) are not strictly ascending"):
        find_crossover(backwards[0], backwards[1])
    with pytest.raises(ComparisonRefused, match="no level"):
        find_crossover(empty[0], empty[1])


def test_a_warning_repeated_at_several_levels_is_one_line_naming_them() -> None:
    spec = sweep("eagle3", {1: FAST, 70: SLOW, 100: SLOW, 250: SLOW}, config=SPEC_CONFIG)
    found = find_crossover(spec, sweep("baseline", {1: FAST, 70: SLOW, 100: SLOW, 250: SLOW}))
    caps = [w for w in found.warnings if "runs at most 48" in w]
    assert len(caps) == 1 and caps[0].startswith("C=70, 100, 250: eagle3 runs at most 48")
    assert "concurrency 70" not in caps[0]


def test_break_even() -> None:
    # DESIGN §1: a 30 ms verify cycle against a 12 ms decode step needs 2.5 accepted tokens.
    assert break_even_accept_length(30.0, 12.0) == pytest.approx(2.5)
    spec = result("eagle3", FAST, tpot=0.0104, accept=2.0)
    base = result("baseline", SLOW, tpot=0.0108)
    estimate = estimate_break_even(spec, base)
    assert estimate.t_cycle == pytest.approx(0.0208)
    assert estimate.break_even == pytest.approx(0.0208 / 0.0108)
    assert estimate.accept_length > estimate.break_even
    with pytest.raises(ComparisonRefused, match="no acceptance length"):
        estimate_break_even(base, base)
