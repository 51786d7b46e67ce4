"""The watchdog: ends streams that stopped sending, at no cost per token.

One task wakes a few times per timeout and expires the deadline of each request in flight
that waited too long: a stall (no new token for ``stall_timeout`` after its first event), or
no first token for ``first_token_timeout`` while the whole run received none either (a
queue moves, a frozen server sends nothing to anyone). See ``docs/metrics.md``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser

__all__ = ["StallWatchdog"]

#: Checks per timeout: a stall is noticed at most a quarter of the timeout late.
_CHECKS_PER_TIMEOUT = 4
_MAX_CHECK_INTERVAL = 1.0

#: Why the watchdog expired a request's deadline.
Expiry = Literal["stall", "first_token"]


class StallWatchdog:
    """Expire the deadline of every watched request that stalled or got no first token.

    :param stall_timeout: seconds a stream may go without a new token after its first one;
        ``None``: no limit.
    :param first_token_timeout: seconds a request may wait for its first token while the run
        receives no token at all; ``None``: no limit.
    """

    def __init__(
        self, stall_timeout: float | None, first_token_timeout: float | None = None
    ) -> None:
        self.stall_timeout = stall_timeout
        self.first_token_timeout = first_token_timeout
        limits = [t for t in (stall_timeout, first_token_timeout) if t]
        self.interval = min([_MAX_CHECK_INTERVAL, *(t / _CHECKS_PER_TIMEOUT for t in limits)])
        # Keyed by id(): records are mutable dataclasses, compared by value, not hashable.
        self._watched: dict[int, tuple[RequestRecord, asyncio.Timeout, StreamParser | None]] = {}
        self._expired: dict[int, Expiry] = {}
        #: The latest token chunk of any request of the run (``perf_counter``).
        self.last_token = float("-inf")

    def watch(
        self, record: RequestRecord, deadline: asyncio.Timeout, parser: StreamParser | None = None
    ) -> None:
        """Watch ``record`` until :meth:`forget`; ``deadline`` is expired if it stalls.

        ``parser``, the stream's, tells when its first event came (token or not).
        """
        self._watched[id(record)] = (record, deadline, parser)

    def forget(self, record: RequestRecord) -> None:
        """Stop watching ``record`` (its request ended)."""
        self._watched.pop(id(record), None)
        if record.chunk_times and record.chunk_times[-1] > self.last_token:
            self.last_token = record.chunk_times[-1]

    def expired(self, record: RequestRecord) -> Expiry | None:
        """Why this watchdog expired ``record``'s deadline; ``None`` when it did not."""
        return self._expired.get(id(record))

    def check(self, now: float) -> None:
        """Expire the deadlines of requests that stalled or waited too long for a token.

        ``now`` is a ``time.perf_counter()`` reading, the clock of the records' chunk times.
        """
        loop = asyncio.get_running_loop()
        watched = list(self._watched.items())
        latest = self.last_token
        for _, (record, _, _) in watched:
            if record.chunk_times and record.chunk_times[-1] > latest:
                latest = record.chunk_times[-1]
        self.last_token = latest
        stall, first = self.stall_timeout, self.first_token_timeout
        for key, (record, deadline, parser) in watched:
            if key in self._expired:
                continue
            if record.chunk_times:
                last: float | None = record.chunk_times[-1]
            else:
                last = parser.first_event if parser is not None else None
            if last is not None:
                if stall and now - last > stall:
                    self._expire(key, "stall", deadline, loop)
            elif first and now - max(record.sent, latest) > first:
                self._expire(key, "first_token", deadline, loop)

    def _expire(
        self, key: int, why: Expiry, deadline: asyncio.Timeout, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._expired[key] = why
        # The deadline fires on the loop's next turn and cancels the request's task;
        # asyncio.timeout turns that into TimeoutError, as for the request timeout.
        deadline.reschedule(loop.time())

    async def run(self) -> None:
        """Check every :attr:`interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            self.check(time.perf_counter())
