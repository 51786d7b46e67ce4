"""A failed or refused verdict's traceback shows the test's code, not the plugin's frames."""

from __future__ import annotations

from pathlib import Path

import pytest

SUITE = """
import dataclasses
from bench_data import result, sweep
from pytest_sglang import (
    assert_at_least, assert_faster, assert_no_regression, estimate_break_even, find_crossover,
)

FAST = [200.0, 201, 202, 203, 204]
SLOW = [100.0, 101, 102, 103, 104]

def test_fails():
    assert_faster(result("a", SLOW), result("b", FAST))

def test_inconclusive():
    assert_faster(result("a", [100.0, 101, 99]), result("b", [100.0, 99, 101]))

def test_refused_levels():
    other = dataclasses.replace(result("b", SLOW), concurrency=2)
    assert_faster(result("a", FAST), other)

def test_refused_unknown_metric():
    assert_faster(result("a", FAST), result("b", SLOW), metric="speed")

def test_refused_too_few_runs():
    assert_at_least(result("a", [100.0]), "output_throughput", 50)

def test_refused_direction():
    assert_faster(result("a", FAST), result("b", SLOW), metric="realised_concurrency")

def test_refused_crossover_levels():
    find_crossover(sweep("a", {1: FAST, 2: FAST}), sweep("b", {1: SLOW}))

def test_refused_break_even():
    estimate_break_even(result("a", FAST), result("b", SLOW))

def test_refused_regression():
    assert_no_regression(result("a", FAST), result("a", SLOW), metric="realised_concurrency")

def test_regression():
    assert_no_regression(result("a", SLOW), result("a", FAST))
"""


def test_verdict_tracebacks_hide_the_plugins_frames(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_verdicts=SUITE)
    pytester.makepyfile(bench_data=Path(__file__).parents[1].joinpath("bench_data.py").read_text())
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=10)
    out = result.stdout.str()
    # Every failure is shown at the test's own line, with the plugin's message...
    for text in (
        "PerformanceAssertionError: assert_faster(a @ C=1, b @ C=1): FAIL",
        "Inconclusive: assert_faster(a @ C=1, b @ C=1): INCONCLUSIVE",
        "ComparisonRefused: cannot compare a @ C=1 with b @ C=2: different concurrency",
        "unknown metric 'speed'",
        "ComparisonRefused: 1 runs cannot bound the median",
        "ComparisonRefused: 'realised_concurrency' describes the load",
        "ComparisonRefused: the sweeps cover different levels",
        "ComparisonRefused: a @ C=1 reports no acceptance length",
        "ComparisonRefused: 'realised_concurrency' describes the load and cannot regress",
        "PerformanceAssertionError: assert_no_regression(a @ C=1 vs a @ C=1 (stored)) on "
        "output_throughput: REGRESSION",
    ):
        assert text in out, text
    # ...and no frame of the plugin's own code is in any of the tracebacks.
    assert "pytest_sglang/" not in out.replace("pytest_sglang/errors", ""), out
    assert out.count("test_verdicts.py:") >= 10
