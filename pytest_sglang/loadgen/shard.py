"""One process's part of a run spread over several load-generator processes.

A closed loop of concurrency ``C`` on ``n`` processes gives each process a share of the
``C`` slots (they differ by at most one) and the requests in proportion to its slots, so
exactly ``C`` requests are in flight in total while every process is busy. An open loop
keeps one arrival schedule: each request keeps its own offset and is sent by the process
that owns it, so the schedule (Poisson or constant) is not distorted. ``sync`` blocks until
every process has finished its warm-up and returns the common start of the measured
requests, on ``perf_counter``'s clock, which is the same for every process of a host.
``finished``, if given, receives each measured request as it ends (for the coordinator:
:mod:`~pytest_sglang.loadgen.relay`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pytest_sglang.loadgen.records import RequestRecord

__all__ = ["Shard", "owner", "slot_shares"]


def slot_shares(total: int, processes: int) -> list[int]:
    """Split ``total`` slots over ``processes`` as evenly as possible (largest first)."""
    base, extra = divmod(total, processes)
    return [base + (1 if i < extra else 0) for i in range(processes)]


def owner(index: int, shares: list[int]) -> int:
    """Return the process that sends request ``index`` (requests follow the slot shares)."""
    position = index % sum(shares)
    for process, share in enumerate(shares):
        if position < share:
            return process
        position -= share
    raise AssertionError("unreachable: position is below the sum of the shares")


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
        return owner(request, list(self.shares)) == self.index
