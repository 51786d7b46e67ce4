"""The watchdog: the deadlines of a run's requests in flight, and why one was cut short.

One task wakes a few times per timeout and expires the deadline of each stream that waited too
long: a stall (no new token for ``stall_timeout`` after its first event), or no first token for
``first_token_timeout`` while the whole run received none either (a queue moves, a frozen
server sends nothing to anyone). No cost per token. See ``docs/metrics.md``.
"""

from __future__ import annotations

import asyncio
import time

from pytest_sglang.loadgen.progress import Periodic
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser

__all__ = ["StallWatchdog"]


class StallWatchdog(Periodic):
    """Expire the deadline of every watched stream that stalled or got no first token.

    A limit of ``None`` is no limit; with none, nothing runs. :meth:`expired` says why, as the
    request's error.
    """

    def __init__(
        self, stall_timeout: float | None, first_token_timeout: float | None = None
    ) -> None:
        self.stall_timeout = stall_timeout
        self.first_token_timeout = first_token_timeout
        limits = [t / 4 for t in (stall_timeout, first_token_timeout) if t]
        #: Seconds between checks: a stall is noticed at most a quarter of its limit late.
        self.interval = min([1.0, *limits]) if limits else None
        # Keyed by id(): records are mutable dataclasses, compared by value, not hashable.
        self._watched: dict[int, tuple[RequestRecord, asyncio.Timeout, StreamParser | None]] = {}
        self._expired: dict[int, str] = {}
        #: The latest token chunk of any request of the run (``perf_counter``).
        self.last_token = float("-inf")

    def watch(
        self, record: RequestRecord, deadline: asyncio.Timeout, parser: StreamParser | None = None
    ) -> None:
        """Watch ``record``'s request until :meth:`forget`; ``parser``: its stream's, if any."""
        self._watched[id(record)] = (record, deadline, parser)

    def forget(self, record: RequestRecord) -> None:
        """Stop watching ``record`` (its request ended)."""
        self._watched.pop(id(record), None)
        if record.chunk_times:
            self.last_token = max(self.last_token, record.chunk_times[-1])

    def expired(self, record: RequestRecord) -> str | None:
        """Why ``record``'s deadline was expired early (its error); ``None`` when it was not."""
        return self._expired.get(id(record))

    def check(self, now: float) -> None:
        """Expire the streams that stalled or waited too long (``now``: ``perf_counter``)."""
        for record, _, _ in self._watched.values():
            if record.chunk_times:
                self.last_token = max(self.last_token, record.chunk_times[-1])
        stall, first = self.stall_timeout, self.first_token_timeout
        for key, (record, deadline, parser) in self._watched.items():
            if parser is None or key in self._expired:
                continue
            last = record.chunk_times[-1] if record.chunk_times else parser.first_event
            if last is not None:
                if stall and now - last > stall:
                    self._expire(
                        key,
                        f"stalled: no new token for {stall:g} s after {len(record.chunk_times)} "
                        "token chunks (stall_timeout; sglang_stall_timeout under pytest)",
                        deadline,
                    )
            elif first and now - max(record.sent, self.last_token) > first:
                self._expire(
                    key,
                    f"timed out waiting for the first token: no token for {first:g} s, for this "
                    f"request or any other (first_token_timeout; HTTP status {record.status})",
                    deadline,
                )

    def cancel_all(self, why: str) -> None:
        """Cut every request in flight now (the run stopped: ``why``), but those ending."""
        for key, (_, deadline, _) in list(self._watched.items()):
            if key not in self._expired and not deadline.expired():
                self._expire(key, f"cancelled: the run stopped ({why})", deadline)

    def _expire(self, key: int, why: str, deadline: asyncio.Timeout) -> None:
        self._expired[key] = why
        # The deadline fires on the loop's next turn and cancels the request's task;
        # asyncio.timeout turns that into TimeoutError, as for the request timeout.
        deadline.reschedule(asyncio.get_running_loop().time())

    def tick(self, late: float) -> None:
        """Check the streams in flight."""
        self.check(time.perf_counter())
