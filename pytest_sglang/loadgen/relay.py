"""What a load worker hands its coordinator while a run goes on: progress and finished records.

A worker's :class:`Relay` sends them in a batch at each progress tick, so a lost worker costs
only what it had not handed over, and one progress line is summed over the workers.
Pickling and sending happen off the event loop. A worker's :class:`Shard` is its part of
the run: its slots and requests, the common start, and where its finished records go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.loadgen.progress import GuardedProgress, ProgressCallback
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.schedule import owner

__all__ = ["Counts", "ProgressSum", "Relay", "Shard"]

#: ``(done, total, output_tokens, elapsed)``: a worker's progress, ``elapsed`` seconds since its
#: run started (so no clock is shared between hosts).
Counts = tuple[int, int, int, float]


class Relay:
    """Sends a worker's finished measured records with its progress, at each progress tick.

    ``send`` (a pipe's) may block while the coordinator is busy, so every message goes out on
    the relay's own thread, one at a time, in order. :meth:`stop` returns once all are sent.
    A message that could not be sent (one that cannot be pickled, a broken pipe) is named
    in an error sent last, so the coordinator says why it misses records.
    """

    def __init__(self, send: Callable[[tuple[str, Any, Any]], object]) -> None:
        self._send = send
        self._records: list[RequestRecord] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sglang-relay")
        self._failure: str | None = None

    def finished(self, record: RequestRecord) -> None:
        """Keep a finished measured request for the next batch."""
        self._records.append(record)

    def progress(self, done: int, total: int, output_tokens: int, elapsed: float) -> None:
        """Send the progress and the records finished since the last batch (the callback)."""
        records, self._records = self._records, []
        self.send(("progress", (done, total, output_tokens, elapsed), records))

    def send(self, message: tuple[str, Any, Any]) -> None:
        """Send ``message`` after those before it (from any thread)."""
        self._thread.submit(self._deliver, message)

    def stop(self) -> None:
        """Wait until every message is sent; then send an error if one could not be.

        After the outcome, the error changes nothing (the coordinator has the whole run);
        in its place, it fails the requests missing with the reason.
        """
        self._thread.shutdown()
        if self._failure is not None:
            self._send(("error", None, self._failure))

    def _deliver(self, message: tuple[str, Any, Any]) -> None:
        try:
            self._send(message)
        except Exception as exc:
            if self._failure is None:
                self._failure = (
                    f"the load worker could not send its results to the coordinator: "
                    f"{type(exc).__name__}: {exc}"
                )


@dataclass
class ProgressSum:
    """The coordinator's view: each worker's latest counts and the records it has sent."""

    callback: ProgressCallback | None = None
    interval: float = 1.0
    #: Each worker's latest counts, ``elapsed`` turned into its start on this clock.
    counts: dict[int, Counts] = field(default_factory=dict)
    records: dict[int, list[RequestRecord]] = field(default_factory=dict)
    _last: float = field(default=0.0, init=False, repr=False)

    def __post_init__(self) -> None:
        self._report = GuardedProgress(self.callback)

    def add(self, worker: int, counts: Counts, records: Sequence[RequestRecord]) -> None:
        """Take one worker's batch, and report the sum at most every ``interval``."""
        done, total, tokens, elapsed = counts  # at the worker's last tick, a moment ago
        self.counts[worker] = (done, total, tokens, time.perf_counter() - elapsed)
        self.records.setdefault(worker, []).extend(records)
        if time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            self.report()

    def report(self) -> None:
        """Call the callback with the counts summed over the workers heard from."""
        if self.counts:
            done, total, tokens, started = zip(*self.counts.values(), strict=True)
            self._report(sum(done), sum(total), sum(tokens), time.perf_counter() - min(started))

    def received(self, worker: int) -> list[RequestRecord]:
        """Return the measured records ``worker`` sent before its end."""
        return self.records.get(worker, [])


@dataclass(frozen=True)
class Shard:
    """Worker ``index`` of ``len(shares)``: its slots, its requests, the common start.

    ``sync`` blocks until every worker has warmed up and returns the common start;
    ``finished`` receives each measured request as it ends (a :class:`Relay`'s).
    """

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
