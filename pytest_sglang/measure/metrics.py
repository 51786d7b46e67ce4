"""The metric vocabulary (name, unit, direction, definition) and distribution summaries.

Every metric is defined once, here (pure, no I/O). A single number is addressed as
``"ttft.p99"``; a bare ``"ttft"`` means its mean; the full definitions are in
``docs/metrics.md``. Percentiles interpolate linearly between order statistics, numpy's
default, without numpy (``docs/metrics.md``, "Percentiles").
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

__all__ = ["METRICS", "Distribution", "MetricSpec", "metric_spec", "percentile"]

#: The summary statistics of every distribution metric.
_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p99")


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
    if stat and (spec.kind != "distribution" or stat not in _STATS):
        raise KeyError(f"unknown statistic in {name!r}; distributions have {', '.join(_STATS)}")
    return spec


def _interpolate(at: Callable[[int], float], count: int, q: float) -> float:
    """Return the *q*-th percentile of ``count`` ordered values, the ``i``-th being ``at(i)``."""
    h = (count - 1) * (q / 100.0)  # numpy's order of operations, for identical rounding
    lo = math.floor(h)
    if lo >= count - 1:
        return float(at(count - 1))
    frac = h - lo
    below, above = float(at(lo)), float(at(lo + 1))
    if frac == 0.0 or below == above:
        return below
    # Same lerp as numpy: anchored on the nearer end, so q=100-ish values never overshoot.
    diff = above - below
    return above - diff * (1.0 - frac) if frac >= 0.5 else below + diff * frac


def percentile(values: Sequence[float], q: float) -> float:
    """Return the *q*-th percentile (0 to 100) of *values*, as numpy's default ("linear").

    :raises ValueError: if *values* is empty or holds NaN, or *q* is outside [0, 100].
    """
    if not 0.0 <= q <= 100.0:  # also rejects NaN
        raise ValueError(f"percentile q must be between 0 and 100, got {q!r}")
    if len(values) == 0:
        raise ValueError("percentile of an empty sample is undefined")
    if any(math.isnan(x) for x in values):
        raise ValueError("percentile: the sample holds NaN")
    return _interpolate(sorted(values).__getitem__, len(values), q)


@dataclass(frozen=True)
class Distribution:
    """Summary of a latency distribution, in seconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        """Summarise ``values``; ``None`` when there are none."""
        return cls.weighted(values, [1] * len(values))

    @classmethod
    def weighted(cls, values: Sequence[float], weights: Sequence[int]) -> Distribution | None:
        """Summarise ``values`` where value ``i`` occurs ``weights[i]`` times (per-token ITL).

        Equals :meth:`of` on the expanded list, without building it.
        """
        pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
        if not pairs:
            return None
        cumulative = list(itertools.accumulate(w for _, w in pairs))
        total = cumulative[-1]

        def at(rank: int) -> float:
            return pairs[bisect.bisect_right(cumulative, rank)][0]

        return cls(
            count=total,
            mean=math.fsum(v * w for v, w in pairs) / total,
            p50=_interpolate(at, total, 50),
            p90=_interpolate(at, total, 90),
            p99=_interpolate(at, total, 99),
            min=pairs[0][0],
            max=pairs[-1][0],
        )
