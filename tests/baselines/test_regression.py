"""assert_no_regression: a non-inferiority verdict against a stored measurement."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sglang.errors import ComparisonRefused, Inconclusive, PerformanceAssertionError
from pytest_sglang.measure.session_format import build_document
from pytest_sglang.measure.store import BaselineStore
from pytest_sglang.verdicts.baseline_options import RegressionCheck, parse_compare_fail
from pytest_sglang.verdicts.decision import Outcome
from pytest_sglang.verdicts.regression import assert_no_regression, regression_verdict
from tests.bench_data import BASE_CONFIG, result

STORED = [100.0, 100.8, 99.4, 100.3, 99.7, 100.1]
COMMIT = {"id": "abc123", "dirty": False}


def test_parse_compare_fail() -> None:
    assert parse_compare_fail(["output_throughput:3%", "ttft_p99:10%,itl.p50:5%"]) == (
        RegressionCheck("output_throughput", 0.03),
        RegressionCheck("ttft.p99", 0.10),
        RegressionCheck("itl.p50", 0.05),
    )
    assert RegressionCheck("ttft.p99", 0.1).describe() == "ttft.p99:10%"
    assert parse_compare_fail(["output_throughput:5"]) == (
        RegressionCheck("output_throughput", 0.05),
    )
    for bad, match in [("mean:5%", "unknown metric"), ("output_throughput:fast", "METRIC:PCT"),
                       ("realised_concurrency:5%", "describes the load"),
                       ("ttft_p42:5%", "unknown")]:  # fmt: skip
        with pytest.raises(ValueError, match=match):
            parse_compare_fail([bad])


def test_a_ten_percent_slower_build_fails_naming_metric_ratio_and_bound() -> None:
    slower = result("baseline", [v * 0.9 for v in STORED], config=BASE_CONFIG)
    stored = result("baseline", STORED, config=BASE_CONFIG)
    with pytest.raises(PerformanceAssertionError) as info:
        assert_no_regression(slower, stored, tolerance=0.03)
    message = str(info.value)
    assert "REGRESSION" in message and "output_throughput" in message
    assert "now/stored = 0.9000" in message
    assert "< bound 0.9700 (3% tolerance)" in message


def test_an_identical_build_passes() -> None:
    same = result("baseline", [v * 1.001 for v in reversed(STORED)], config=BASE_CONFIG)
    stored = result("baseline", STORED, config=BASE_CONFIG)
    verdict = assert_no_regression(same, stored, tolerance=0.03)
    assert verdict.outcome is Outcome.PASS
    assert "no regression" in verdict.summary


def test_a_noisy_baseline_is_inconclusive_and_says_so() -> None:
    noisy = [100.0, 110.0, 92.0, 104.0, 96.0]
    fresh = result("baseline", [98.0, 107.0, 93.0, 101.0, 95.0], config=BASE_CONFIG)
    with pytest.raises(Inconclusive) as info:
        assert_no_regression(fresh, result("baseline", noisy, config=BASE_CONFIG))
    assert "run-to-run spread" in str(info.value)


def test_latency_regressions_read_in_the_metrics_own_direction() -> None:
    stored = result("baseline", STORED, ttft=[0.100, 0.101, 0.099, 0.100, 0.1005, 0.0995])
    slower = result("baseline", STORED, ttft=[0.120, 0.121, 0.119, 0.120, 0.1205, 0.1195])
    verdict = regression_verdict(slower, stored, "ttft.p50", 0.10)
    assert verdict.outcome is Outcome.FAIL
    assert "now/stored = 1.2000" in verdict.summary and "> bound 1.1000" in verdict.summary


def test_a_fingerprint_mismatch_is_refused_with_the_fields() -> None:
    fresh = result("baseline", STORED, config={**BASE_CONFIG, "tp_size": 4})
    stored = result("baseline", STORED, config=BASE_CONFIG)
    with pytest.raises(ComparisonRefused, match=r"tp_size: 4 \(now\) vs 8 \(stored\)"):
        assert_no_regression(fresh, stored)


def test_the_sglang_version_is_shown_not_refused(tmp_path: Path) -> None:
    store = BaselineStore(str(tmp_path))
    old = {**BASE_CONFIG, "version": "0.5.23"}
    store.save(
        "released",
        build_document(
            "released",
            [{"test": "t", **result("baseline", STORED, config=old).as_dict()}],
            commit=COMMIT,
            machine={},
        ),
    )
    fresh = result("baseline", STORED, config={**BASE_CONFIG, "version": "0.5.24"})
    verdict = assert_no_regression(fresh, storage=str(tmp_path))
    assert verdict.outcome is Outcome.PASS
    assert "sglang/0001_released" in verdict.summary


def test_no_stored_baseline_skips_with_how_to_save(tmp_path: Path) -> None:
    fresh = result("baseline", STORED, config=BASE_CONFIG)
    with pytest.raises(pytest.skip.Exception, match="no stored baseline"):
        assert_no_regression(fresh, storage=str(tmp_path))


def test_a_stored_near_miss_is_refused_with_the_fields(tmp_path: Path) -> None:
    store = BaselineStore(str(tmp_path))
    stored = result("baseline", STORED, config=BASE_CONFIG).as_dict()
    store.save("tp8", build_document("tp8", [{"test": "t", **stored}], commit=COMMIT, machine={}))
    fresh = result("baseline", STORED, config={**BASE_CONFIG, "tp_size": 4})
    with pytest.raises(ComparisonRefused, match=r"sglang/0001_tp8.*\n  tp_size: 4 \(now\) vs 8"):
        assert_no_regression(fresh, storage=str(tmp_path))
