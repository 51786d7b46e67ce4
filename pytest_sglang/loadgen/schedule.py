"""Open-loop arrival schedules (pure): when each request is due, from the run's start."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["ARRIVALS", "Arrival", "OpenLoop", "arrival_offsets", "check_arrival"]

Arrival = Literal["poisson", "constant"]
ARRIVALS: tuple[str, ...] = get_args(Arrival)


def arrival_offsets(count: int, rate: float, arrival: Arrival, seed: str) -> list[float]:
    """Return ``count`` send offsets in seconds, the first at 0, at ``rate`` requests/s.

    ``constant`` spaces requests exactly ``1 / rate`` apart; ``poisson`` draws exponential
    gaps of mean ``1 / rate`` from a generator seeded with ``seed``, so a run's schedule is
    reproducible. The first request goes at once in both, so a run never starts idle.
    """
    check_arrival(rate, arrival)
    if arrival == "constant":
        return [i / rate for i in range(count)]
    rng = random.Random(seed)
    offsets: list[float] = []
    now = 0.0
    for _ in range(count):
        offsets.append(now)
        now += rng.expovariate(rate)
    return offsets


def check_arrival(rate: float, arrival: str) -> None:
    """Raise :class:`ValueError`, saying what is wrong, unless ``rate`` and ``arrival`` work."""
    if isinstance(rate, bool) or not (
        isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0
    ):
        raise ValueError(f"the request rate must be a finite number > 0 per second, got {rate!r}")
    if arrival not in ARRIVALS:
        raise ValueError(
            f"arrival must be one of {', '.join(map(repr, ARRIVALS))}, got {arrival!r}"
        )


@dataclass(frozen=True)
class OpenLoop:
    """An open-loop load: ``rate`` requests per second, ``arrival`` gaps, an optional cap.

    What ``sglang_bench(server, workload, rate=20.0, arrival="poisson", max_concurrency=64)``
    measures instead of a closed loop; checked at construction.
    """

    rate: float
    arrival: Arrival = "poisson"
    max_concurrency: int | None = None

    def __post_init__(self) -> None:
        check_arrival(self.rate, self.arrival)
        cap = self.max_concurrency
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
            raise ValueError(
                f"max_concurrency must be None (no cap) or an integer >= 1, got {cap!r}"
            )
        object.__setattr__(self, "rate", float(self.rate))

    def key(self) -> str:
        """Return a stable text key, e.g. ``open:poisson:20:cap64``."""
        cap = "" if self.max_concurrency is None else f":cap{self.max_concurrency}"
        return f"open:{self.arrival}:{self.rate!r}{cap}"

    def describe(self) -> str:
        """Return e.g. ``20 req/s poisson, at most 64 in flight``."""
        cap = "" if self.max_concurrency is None else f", at most {self.max_concurrency} in flight"
        return f"{self.rate:g} req/s {self.arrival}{cap}"

    def as_dict(self) -> dict[str, object]:
        """Return plain JSON types: ``rate``, ``arrival``, ``max_concurrency``."""
        return {"rate": self.rate, "arrival": self.arrival, "max_concurrency": self.max_concurrency}
