"""Open-loop arrival schedules (pure): when each request is due, from the run's start."""

from __future__ import annotations

import math
import random
from typing import Literal, get_args

__all__ = ["ARRIVALS", "Arrival", "arrival_offsets", "check_arrival"]

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
