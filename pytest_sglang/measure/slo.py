"""Service-level objectives: per-request attainment and goodput (pure, no I/O).

Each objective is judged per request; goodput is the rate of requests that meet every one
(``docs/metrics.md``, "Service-level objectives").
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, cast, get_args

from pytest_sglang.loadgen.records import RequestRecord

__all__ = ["Attainment", "Objective", "Slo", "SloMetric", "attainment", "goodput"]

#: The per-request metrics an objective may bound (all in seconds, smaller is better).
SloMetric = Literal["ttft", "tpot", "itl", "e2e_latency"]
_METRICS: tuple[str, ...] = get_args(SloMetric)
_OBJECTIVE_RE = re.compile(
    r"^\s*(?P<metric>[a-z_0-9]+)\.p(?P<pct>[0-9]+(?:\.[0-9]+)?)\s*<=\s*"
    r"(?P<value>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>ms|s)?\s*$"
)


@dataclass(frozen=True)
class Objective:
    """``percentile`` % of requests have ``metric`` at most ``limit`` seconds."""

    metric: SloMetric
    limit: float
    percentile: float

    def __post_init__(self) -> None:
        if self.metric not in _METRICS:
            raise ValueError(
                f"{self.metric!r} is not a per-request metric an SLO bounds: use one of "
                f"{', '.join(_METRICS)}"
            )
        if not (math.isfinite(self.limit) and self.limit > 0):
            raise ValueError(f"the limit of {self.metric} must be > 0 seconds, got {self.limit!r}")
        if not 0 < self.percentile < 100:
            raise ValueError(
                f"the percentile of {self.metric} must be between 0 and 100 (exclusive), "
                f"got {self.percentile!r}; e.g. 99 for p99"
            )

    @property
    def fraction(self) -> float:
        """The fraction of requests that must meet the limit (0.99 for p99)."""
        return self.percentile / 100.0

    def describe(self) -> str:
        """Return e.g. ``ttft.p99 <= 2000 ms``."""
        return f"{self.metric}.p{self.percentile:g} <= {self.limit * 1000:g} ms"

    def met_by(self, record: RequestRecord) -> bool:
        """Whether the request met this objective (a failed request never does).

        A request without a value (TPOT of a one-token output, ITL of a one-chunk stream)
        cannot violate the objective and counts as meeting it, as in vLLM's goodput.
        """
        if not record.ok:
            return False
        if self.metric == "itl":  # the request's worst gap per token
            value = max((gap / n for gap, n in record.gaps if n > 0), default=None)
        else:
            value = getattr(record, "e2e" if self.metric == "e2e_latency" else self.metric)
        return value is None or value <= self.limit


@dataclass(frozen=True)
class Slo:
    """A service-level objective: one or more per-request objectives that must all hold.

    ``Slo.parse("ttft.p99 <= 2s, tpot.p90 <= 50ms")`` or
    ``Slo((Objective("ttft", 2.0, 99),))``.
    """

    objectives: tuple[Objective, ...]

    def __post_init__(self) -> None:
        if not self.objectives:
            raise ValueError("an SLO needs at least one objective, e.g. Slo.parse('ttft.p99<=2s')")
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"an SLO bounds each metric once; got {', '.join(metrics)}")

    @classmethod
    def parse(cls, text: str) -> Slo:
        """Parse ``METRIC.pPCT <= VALUE[ms|s]`` objectives separated by commas."""
        objectives = []
        for part in text.split(","):
            match = _OBJECTIVE_RE.match(part)
            if match is None:
                raise ValueError(
                    f"{part.strip()!r} is not an objective; write METRIC.pPCT <= VALUE with "
                    f"METRIC one of {', '.join(_METRICS)} and VALUE in s or ms, e.g. "
                    "'ttft.p99 <= 2s, tpot.p90 <= 50ms'"
                )
            limit = float(match["value"]) * (0.001 if match["unit"] == "ms" else 1.0)
            metric = cast("SloMetric", match["metric"])
            objectives.append(Objective(metric, limit, float(match["pct"])))
        return cls(tuple(objectives))

    def describe(self) -> str:
        """Return the objectives joined by ``and``."""
        return " and ".join(o.describe() for o in self.objectives)

    def met_by(self, record: RequestRecord) -> bool:
        """Whether the request met every objective."""
        return all(o.met_by(record) for o in self.objectives)


@dataclass(frozen=True)
class Attainment:
    """How many of ``requests`` met ``objective``."""

    objective: Objective
    met: int
    requests: int

    @property
    def fraction(self) -> float:
        """The fraction that met it (0 for no requests)."""
        return self.met / self.requests if self.requests else 0.0


def attainment(slo: Slo, records: Sequence[RequestRecord]) -> list[Attainment]:
    """Return, per objective, how many of ``records`` met it."""
    return [Attainment(o, sum(map(o.met_by, records)), len(records)) for o in slo.objectives]


def goodput(slo: Slo, records: Sequence[RequestRecord], duration: float) -> float:
    """Return requests per second that met every objective over ``duration`` seconds."""
    return sum(map(slo.met_by, records)) / duration if duration > 0 else 0.0
