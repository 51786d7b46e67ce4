"""The metric vocabulary: every metric's name, unit, direction and definition, once.

A single number is addressed as ``"ttft.p99"``; a bare ``"ttft"`` means its mean; the full
definitions are in ``docs/metrics.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = ["DISTRIBUTION_STATS", "METRICS", "MetricSpec", "metric_spec"]

#: The summary statistics of every distribution metric.
DISTRIBUTION_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p99")


@dataclass(frozen=True)
class MetricSpec:
    """One metric: its unit, which direction is better (None: descriptive), and its definition."""

    name: str
    unit: str
    larger_is_better: bool | None
    kind: Literal["scalar", "distribution"]
    definition: str


_WINDOW = "of the completed measured requests / (last response end - first request sent)"
METRICS: Mapping[str, MetricSpec] = MappingProxyType(
    {
        spec.name: spec
        for spec in (
            MetricSpec("output_throughput", "tok/s", True, "scalar", f"generated tokens {_WINDOW}"),
            MetricSpec("total_throughput", "tok/s", True, "scalar", f"all tokens {_WINDOW}"),
            MetricSpec("request_throughput", "req/s", True, "scalar", f"count {_WINDOW}"),
            MetricSpec("ttft", "s", False, "distribution", "request sent -> first token chunk"),
            MetricSpec("itl", "s", False, "distribution", "chunk gap / its tokens, per token"),
            MetricSpec("itl_chunk", "s", False, "distribution", "gap between token chunks"),
            MetricSpec("tpot", "s", False, "distribution", "(e2e - ttft) / (output tokens - 1)"),
            MetricSpec("e2e_latency", "s", False, "distribution", "request sent -> response end"),
            MetricSpec("acceptance_length", "tok/verify", True, "scalar", "tokens / verify calls"),
            MetricSpec("realised_concurrency", "requests", None, "scalar", "sum(e2e) / window"),
            MetricSpec("cache_hit_ratio", "fraction", None, "scalar", "cached / prompt tokens"),
            MetricSpec("client_cpu_fraction", "cores", None, "scalar", "load generator's CPU"),
            MetricSpec("loop_lag_p99", "s", False, "scalar", "p99 of the client's loop lag"),
            MetricSpec("failed", "requests", False, "scalar", "measured requests that failed"),
        )
    }
)


def metric_spec(name: str) -> MetricSpec:
    """Return the spec of ``name``, which may carry a statistic: ``"ttft.p99"``.

    :raises KeyError: with the known names, for an unknown metric or statistic.
    """
    __tracebackhide__ = True
    base, _, stat = name.partition(".")
    spec = METRICS.get(base)
    if spec is None:
        raise KeyError(f"unknown metric {name!r}; known: {', '.join(METRICS)}")
    if stat and (spec.kind != "distribution" or stat not in DISTRIBUTION_STATS):
        raise KeyError(
            f"unknown statistic in {name!r}; distributions have {', '.join(DISTRIBUTION_STATS)}"
        )
    return spec
