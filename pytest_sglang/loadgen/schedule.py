"""How a run's requests arrive (pure): a closed loop's slots, or an open loop's schedule.

:data:`Load` is what :meth:`~pytest_sglang.loadgen.runner.LoadGenerator.run` takes. Both
kinds answer the same questions: how many slots (``None``: as many as requests), when each
request is due (``None``: at once), what seeds the run's prompts, the fields a measurement
records, its cache key and its label.

A run spread over several workers gives each a :class:`~pytest_sglang.loadgen.runner.Shard`:
a closed loop's ``C`` slots are split over them (requests follow the slots, :func:`owner`),
so exactly ``C`` are in flight in total; an open loop keeps one schedule, each request sent
by the worker that owns it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from pytest_sglang.loadgen.workload import check_count

__all__ = ["ARRIVALS", "Arrival", "ClosedLoop", "Load", "OpenLoop", "owner", "slot_shares"]

Arrival = Literal["poisson", "constant"]
ARRIVALS: tuple[str, ...] = get_args(Arrival)


@dataclass(frozen=True)
class ClosedLoop:
    """A closed loop: exactly ``concurrency`` requests in flight until all are sent."""

    concurrency: int
    mode: ClassVar[Literal["closed"]] = "closed"
    rate: ClassVar[None] = None
    arrival: ClassVar[None] = None
    max_concurrency: ClassVar[None] = None

    def __post_init__(self) -> None:
        check_count("concurrency", self.concurrency)

    @property
    def slots(self) -> int:
        """Requests in flight at most: the concurrency."""
        return self.concurrency

    def salt(self, repeat: int) -> str:
        """Return the seed of repeat ``repeat``'s prompts (each repeat sends others)."""
        return f"closed/c{self.concurrency}/r{repeat}"

    def offsets(self, count: int, seed: str) -> list[float] | None:
        """Return when each of ``count`` arrivals is due: ``None``, as soon as a slot is free."""
        return None

    def key(self) -> str:
        """Return a stable text key, e.g. ``closed:64``."""
        return f"closed:{self.concurrency}"

    def describe(self) -> str:
        """Return e.g. ``C=64``."""
        return f"C={self.concurrency}"


@dataclass(frozen=True)
class OpenLoop:
    """An open-loop load: ``rate`` requests per second, ``arrival`` gaps, an optional cap.

    What ``sglang_bench(server, workload, rate=20.0, arrival="poisson", max_concurrency=64)``
    measures instead of a closed loop; checked at construction. With multi-turn sessions
    ``rate`` is sessions per second: each session's first turn leaves on the schedule, each
    later turn once the previous answer is complete.
    """

    rate: float
    arrival: Arrival = "poisson"
    max_concurrency: int | None = None
    mode: ClassVar[Literal["open"]] = "open"
    concurrency: ClassVar[None] = None

    def __post_init__(self) -> None:
        rate = self.rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate < math.inf:
            raise ValueError(
                f"the request rate must be a finite number > 0 per second, got {rate!r}"
            )
        if self.arrival not in ARRIVALS:
            raise ValueError(
                f"arrival must be one of {', '.join(map(repr, ARRIVALS))}, got {self.arrival!r}"
            )
        if self.max_concurrency is not None:  # None: no cap
            check_count("max_concurrency", self.max_concurrency)
        object.__setattr__(self, "rate", float(self.rate))

    @property
    def slots(self) -> int | None:
        """Requests in flight at most: the cap, or ``None`` (every request may be)."""
        return self.max_concurrency

    def salt(self, repeat: int) -> str:
        """Return the seed of repeat ``repeat``'s prompts and schedule."""
        return f"open/{self.arrival}/{self.rate:g}/r{repeat}"

    def offsets(self, count: int, seed: str) -> list[float]:
        """Return when each of ``count`` arrivals is due, in seconds from the run's start.

        ``constant`` spaces them exactly ``1 / rate`` apart; ``poisson`` draws exponential
        gaps of mean ``1 / rate`` from a generator seeded with ``seed``, so a run's schedule
        is reproducible. The first goes at once in both, so a run never starts idle.
        """
        if self.arrival == "constant":
            return [i / self.rate for i in range(count)]
        rng = random.Random(f"{seed}/arrivals")
        gaps = [rng.expovariate(self.rate) for _ in range(count - 1)]
        return list(itertools.accumulate(gaps, initial=0.0))[:count]

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


#: How a run's requests arrive.
Load = ClosedLoop | OpenLoop


def run_fields(load: Load) -> dict[str, Any]:
    """Return the load's fields as a measurement records them (``mode``, ``rate``, ...)."""
    fields = ("mode", "concurrency", "rate", "arrival", "max_concurrency")
    return {name: getattr(load, name) for name in fields}


def slot_shares(total: int, processes: int) -> list[int]:
    """Split ``total`` slots over ``processes`` as evenly as possible (largest first)."""
    base, extra = divmod(total, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


def owner(index: int, shares: Sequence[int]) -> int:
    """Return the process that sends request ``index`` (requests follow the slot shares)."""
    return bisect.bisect_right(list(itertools.accumulate(shares)), index % sum(shares))
