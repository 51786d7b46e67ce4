"""One worker's part of a run spread over several load-generator workers.

A closed loop's ``C`` slots are split over the workers (requests follow the slots), so
exactly ``C`` are in flight in total; an open loop keeps one schedule, each request sent by
the worker that owns it. ``sync`` blocks until every worker has warmed up and returns the
common start; ``finished`` receives each measured request as it ends
(:mod:`~pytest_sglang.loadgen.relay`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_sglang.loadgen.records import RequestRecord

__all__ = ["Shard", "owner", "slot_shares"]


def slot_shares(total: int, processes: int) -> list[int]:
    """Split ``total`` slots over ``processes`` as evenly as possible (largest first)."""
    base, extra = divmod(total, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


def owner(index: int, shares: Sequence[int]) -> int:
    """Return the process that sends request ``index`` (requests follow the slot shares)."""
    return bisect.bisect_right(list(itertools.accumulate(shares)), index % sum(shares))


@dataclass(frozen=True)
class Shard:
    """Process ``index`` of ``len(shares)``: its slots, its requests, the common start."""

    index: int
    shares: tuple[int, ...]
    sync: Callable[[], float]
    finished: Callable[[RequestRecord], None] | None = None

    @property
    def slots(self) -> int:
        """This process's share of the concurrency (or of the open loop's cap)."""
        return self.shares[self.index]

    def owns(self, request: int) -> bool:
        """Whether this process sends request ``request`` (warm-up and measured alike)."""
        return owner(request, self.shares) == self.index
