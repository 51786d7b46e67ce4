from __future__ import annotations

import pytest

from pytest_sglang.measure.metrics import METRICS, metric_spec


def test_every_metric_knows_its_unit_and_direction() -> None:
    for name, spec in METRICS.items():
        assert spec.name == name and spec.unit and spec.definition
    larger = {name: spec.larger_is_better for name, spec in METRICS.items()}
    assert larger["output_throughput"] is True
    assert larger["acceptance_length"] is True
    for latency in ("ttft", "itl", "itl_chunk", "tpot", "e2e_latency"):
        assert larger[latency] is False
        assert METRICS[latency].unit == "s" and METRICS[latency].kind == "distribution"
    assert larger["realised_concurrency"] is None


def test_metric_spec_with_statistic() -> None:
    assert metric_spec("ttft.p99") is METRICS["ttft"]
    assert metric_spec("output_throughput") is METRICS["output_throughput"]
    with pytest.raises(KeyError, match=r"unknown statistic in 'ttft\.p95'"):
        metric_spec("ttft.p95")
    with pytest.raises(KeyError, match="unknown metric 'latency'"):
        metric_spec("latency")
