"""What a load worker hands its coordinator while a run goes on: progress and finished records.

A worker's :class:`Relay` collects them as they happen and the coordinator takes them in
batches, so a lost worker costs only what it had not handed over, and one progress line is
summed over the workers. Pickling and sending happen off the event loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.records import RequestRecord

__all__ = ["Counts", "ProgressSum", "Relay", "Sender"]

#: ``(done, total, output_tokens, elapsed)``: a worker's progress, ``elapsed`` seconds since its
#: run started, as of the hand-over (so no clock is shared between hosts).
Counts = tuple[int, int, int, float]


class Relay:
    """One worker's finished measured records and progress, taken in batches by another thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._counts = (0, 0, 0)
        self._started = time.perf_counter()
        self._changed = False

    def finished(self, record: RequestRecord) -> None:
        """Keep a finished measured request (called on the event loop)."""
        with self._lock:
            self._records.append(record)

    def progress(self, done: int, total: int, output_tokens: int, elapsed: float) -> None:
        """Note the run's progress (a :class:`ProgressCallback`, called on the event loop)."""
        self._counts, self._started = (done, total, output_tokens), time.perf_counter() - elapsed
        self._changed = True

    def take(self) -> tuple[Counts, list[RequestRecord]] | None:
        """Return the progress and records new since the last take; None: nothing new."""
        with self._lock:
            records, self._records = self._records, []
        if not records and not self._changed:
            return None
        self._changed = False
        return (*self._counts, time.perf_counter() - self._started), records


class Sender:
    """A thread that sends a :class:`Relay`'s batches every ``interval`` until stopped.

    ``send`` (a pipe's) may block while the coordinator is busy: on this thread, never on the
    event loop. :meth:`stop` returns once the last batch is sent.
    """

    def __init__(
        self,
        relay: Relay,
        send: Callable[[tuple[str, Counts, list[RequestRecord]]], object],
        interval: float,
    ) -> None:
        self._stopped = threading.Event()

        def loop() -> None:
            while True:
                stopping = self._stopped.wait(interval)
                batch = relay.take()
                if batch is not None:
                    send(("progress", *batch))
                if stopping:
                    return

        self._thread = threading.Thread(target=loop, name="sglang-relay", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Send what is left and wait for the thread."""
        self._stopped.set()
        self._thread.join()


@dataclass
class ProgressSum:
    """The coordinator's view: each worker's latest counts and the records it has sent."""

    callback: ProgressCallback | None = None
    interval: float = 1.0
    #: Each worker's latest counts, ``elapsed`` turned into its start on this clock.
    counts: dict[int, Counts] = field(default_factory=dict)
    records: dict[int, list[RequestRecord]] = field(default_factory=dict)
    _last: float = field(default=0.0, init=False, repr=False)

    def add(self, worker: int, counts: Counts, records: Sequence[RequestRecord]) -> None:
        """Take one worker's batch, and report the sum at most every ``interval``."""
        done, total, tokens, elapsed = counts
        self.counts[worker] = (done, total, tokens, time.perf_counter() - elapsed)
        self.records.setdefault(worker, []).extend(records)
        if time.monotonic() - self._last >= self.interval:
            self._last = time.monotonic()
            self.report()

    def report(self) -> None:
        """Call the callback with the counts summed over the workers heard from."""
        if self.callback is None or not self.counts:
            return
        done, total, tokens, started = zip(*self.counts.values(), strict=True)
        self.callback(sum(done), sum(total), sum(tokens), time.perf_counter() - min(started))

    def received(self, worker: int) -> list[RequestRecord]:
        """Return the measured records ``worker`` sent before its end."""
        return self.records.get(worker, [])
