"""The stall watchdog: ends streams that stopped sending tokens, at no cost per token.

A per-read timeout would put a timer on every chunk of every stream, on the hot path the
client-efficiency benchmark measures. Instead one task wakes a few times per
``stall_timeout``, looks at the last token chunk of each request in flight, and expires the
deadline (an :func:`asyncio.timeout`) of those silent for longer than ``stall_timeout``.

Only silence after the first token is a stall. Before it, a request may be waiting in the
server's queue (at high concurrency, for as long as it takes earlier requests to finish):
that time is bounded by the request timeout alone.
"""

from __future__ import annotations

import asyncio
import time

from pytest_sglang.loadgen.records import RequestRecord

__all__ = ["StallWatchdog"]

#: Checks per stall timeout: a stall is noticed at most a quarter of the timeout late.
_CHECKS_PER_TIMEOUT = 4
_MAX_CHECK_INTERVAL = 1.0


class StallWatchdog:
    """Expire the deadline of every watched request silent for ``stall_timeout`` seconds."""

    def __init__(self, stall_timeout: float) -> None:
        self.stall_timeout = stall_timeout
        self.interval = min(_MAX_CHECK_INTERVAL, stall_timeout / _CHECKS_PER_TIMEOUT)
        # Keyed by id(): records are mutable dataclasses, compared by value, not hashable.
        self._watched: dict[int, tuple[RequestRecord, asyncio.Timeout]] = {}
        self._stalled: set[int] = set()

    def watch(self, record: RequestRecord, deadline: asyncio.Timeout) -> None:
        """Watch ``record`` until :meth:`forget`; ``deadline`` is expired if it stalls."""
        self._watched[id(record)] = (record, deadline)

    def forget(self, record: RequestRecord) -> None:
        """Stop watching ``record`` (its request ended)."""
        self._watched.pop(id(record), None)

    def stalled(self, record: RequestRecord) -> bool:
        """Whether this watchdog expired ``record``'s deadline."""
        return id(record) in self._stalled

    def check(self, now: float) -> None:
        """Expire the deadlines of requests whose last token chunk is older than the timeout.

        ``now`` is a ``time.perf_counter()`` reading, the clock of the records' chunk times.
        """
        loop = asyncio.get_running_loop()
        for key, (record, deadline) in list(self._watched.items()):
            if key in self._stalled or not record.chunk_times:
                continue
            if now - record.chunk_times[-1] > self.stall_timeout:
                self._stalled.add(key)
                # The deadline fires on the loop's next turn and cancels the request's task;
                # asyncio.timeout turns that into TimeoutError, as for the request timeout.
                deadline.reschedule(loop.time())

    async def run(self) -> None:
        """Check every :attr:`interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check(time.perf_counter())
