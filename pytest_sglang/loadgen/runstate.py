"""What every request of one run shares: progress, watchdog, clients, the failure streak.

The streak is how a run notices a server that stopped answering: ``limit`` requests in a row
without an answer set :attr:`RunState.aborted`, and the requests still in flight are ended
at once (they wait on the same silent server) and marked cancelled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx

from pytest_sglang.loadgen.habits import ConnectionHabits
from pytest_sglang.loadgen.progress import Tally
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.watchdog import StallWatchdog

__all__ = ["RunState"]


class RunState:
    """What every request of one run shares: progress, watchdog, clients, failure streak."""

    def __init__(
        self,
        client: Callable[..., httpx.AsyncClient],
        habits: ConnectionHabits,
        limit: int | None,
        connections: int,
        tally: Tally,
        watchdog: StallWatchdog | None,
    ) -> None:
        self.tally = tally
        self.watchdog = watchdog
        self._client = client
        self._habits = habits
        self._limit = limit
        self._connections = connections
        self._pooled: httpx.AsyncClient | None = None
        self._fresh: httpx.AsyncClient | None = None
        #: The warm-up's probe is sending its second request (see ``LoadGenerator._probe``).
        self.probing = False
        #: Requests in a row that ended without an answer.
        self.streak = 0
        self._last_error: str | None = None
        #: Why the run stopped sending; ``None`` while it runs.
        self.aborted: str | None = None
        #: The deadlines of the requests in flight, by ``id`` of their records.
        self.inflight: dict[int, asyncio.Timeout] = {}
        #: Requests in flight when the run stopped, cut short then (``id`` of their records).
        self.cancelled: set[int] = set()
        #: A sharded run's common start of the measured phase (``perf_counter``).
        self.origin: float | None = None

    def client(self, *, fresh: bool = False) -> httpx.AsyncClient:
        """Return the pooled client, or the one that opens a fresh connection per request."""
        if fresh or not self._habits.reuse:  # a server that closes: a fresh one per request
            if self._fresh is None:
                self._fresh = self._client(self._connections, reuse=False)
            return self._fresh
        if self._pooled is None:
            self._pooled = self._client(self._connections)
        return self._pooled

    def settle(self, record: RequestRecord, unanswered: bool) -> None:
        """Count a finished request towards (or reset) the unanswered streak."""
        if not unanswered:
            self.streak = 0
            return
        self.streak += 1
        self._last_error = record.error
        limit = self._limit
        if limit is not None and self.streak >= limit and self.aborted is None:
            self.aborted = (
                f"the server stopped answering: {self.streak} consecutive transport "
                f"failures/timeouts (max_consecutive_failures={limit}; last: "
                f"{self._last_error})"
            )
            # The requests still in flight wait on the same silent server: end them now
            # rather than after their own timeouts (they were sent: their records stay).
            loop = asyncio.get_running_loop()
            for key, deadline in self.inflight.items():
                # A deadline the watchdog expired in the same tick is ending already (and
                # cannot be rescheduled): its own message stands.
                if key != id(record) and not deadline.expired():
                    self.cancelled.add(key)
                    deadline.reschedule(loop.time())

    async def close(self) -> None:
        """Close the run's clients."""
        for client in (self._pooled, self._fresh):
            if client is not None:
                await client.aclose()
