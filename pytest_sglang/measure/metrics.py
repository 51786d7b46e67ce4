"""The metric vocabulary: every metric's name, unit, direction and definition, once.

A single number is addressed as ``"ttft.p99"``; a bare ``"ttft"`` means its mean
(``docs/metrics.md``).
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

    @property
    def direction(self) -> str:
        """``"larger is better"``, ``"smaller is better"`` or ``"descriptive"``."""
        if self.larger_is_better is None:
            return "descriptive"
        return "larger is better" if self.larger_is_better else "smaller is better"


def _spec(
    name: str,
    unit: str,
    larger_is_better: bool | None,
    kind: Literal["scalar", "distribution"],
    definition: str,
) -> tuple[str, MetricSpec]:
    return name, MetricSpec(name, unit, larger_is_better, kind, definition)


METRICS: Mapping[str, MetricSpec] = MappingProxyType(
    dict(
        [
            _spec(
                "output_throughput",
                "tok/s",
                True,
                "scalar",
                "generated tokens of the completed measured requests / (last measured response "
                "end - first measured request sent)",
            ),
            _spec(
                "total_throughput",
                "tok/s",
                True,
                "scalar",
                "(prompt + generated tokens) of the completed measured requests / the same window",
            ),
            _spec(
                "request_throughput",
                "req/s",
                True,
                "scalar",
                "completed measured requests / the same window",
            ),
            _spec(
                "ttft",
                "s",
                False,
                "distribution",
                "time to first token: request sent -> first chunk carrying generated tokens, "
                "one value per completed streamed request",
            ),
            _spec(
                "itl",
                "s",
                False,
                "distribution",
                "inter-token latency per token: the gap between two chunks / the tokens the "
                "later chunk carried, counted once per token (a 3-token chunk contributes 3 "
                "values), so percentiles are token-weighted; the mean is sum(gaps) / tokens",
            ),
            _spec(
                "itl_chunk",
                "s",
                False,
                "distribution",
                "inter-chunk latency: the gap between consecutive token-carrying chunks, one "
                "value per gap (differs from itl when chunks carry several tokens, as under "
                "speculative decoding)",
            ),
            _spec(
                "tpot",
                "s",
                False,
                "distribution",
                "time per output token: (e2e - ttft) / (output tokens - 1), one value per "
                "completed streamed request with at least 2 tokens",
            ),
            _spec(
                "e2e_latency",
                "s",
                False,
                "distribution",
                "end-to-end latency: request sent -> response complete, per completed request",
            ),
            _spec(
                "acceptance_length",
                "tok/verify",
                True,
                "scalar",
                "speculative acceptance length: sum(completion_tokens) / sum(spec_verify_ct) "
                "over the completed measured requests (bonus token included; 1.0 = no gain); "
                "None without speculative decoding",
            ),
            _spec(
                "realised_concurrency",
                "requests",
                None,
                "scalar",
                "time-weighted mean of measured requests in flight over the window: "
                "sum(e2e of all measured requests) / window",
            ),
            _spec(
                "cache_hit_ratio",
                "fraction",
                None,
                "scalar",
                "prompt tokens served from the server's prefix cache / all prompt tokens, over "
                "the completed requests that reported cached_tokens",
            ),
            _spec(
                "client_cpu_fraction",
                "cores",
                None,
                "scalar",
                "the load generator's own CPU seconds per wall second over the measured "
                "requests (1.0: one core busy); a client near 1.0 cannot keep up",
            ),
            _spec(
                "loop_lag_p99",
                "s",
                False,
                "scalar",
                "p99 of how late the load generator's event loop woke from a 50 ms sleep "
                "during the measured requests: the client's own delay on every chunk it read",
            ),
            _spec(
                "failed",
                "requests",
                False,
                "scalar",
                "measured requests that failed (HTTP error, transport error, timeout, "
                "incomplete stream)",
            ),
        ]
    )
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
