"""A run spread over several load-generator workers: the coordinator, and processes on this host.

One asyncio process saturates one core. Every worker, a process of :func:`run_sharded` or a
Ray actor (:mod:`~pytest_sglang.loadgen.ray_workers`), runs :func:`serve` on its
:class:`~pytest_sglang.loadgen.runner.Shard` and sends the same messages back: its
:class:`Relay` hands over progress and finished records in a batch at each progress tick, so
a lost worker costs only what it had not handed over. :func:`coordinate` drives either kind,
sums their progress (:class:`ProgressSum`) and merges their records. The guarantees are in
``docs/scaling.md``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Literal, Protocol, TypedDict, Unpack, cast

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import GuardedProgress, ProgressCallback
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering, Shard, run_blocking
from pytest_sglang.loadgen.schedule import Load, owner, slot_shares
from pytest_sglang.loadgen.workload import Workload, check_count

__all__ = ["Coordination", "Counts", "LoadWorkersFailed", "ProgressSum", "Relay", "RunPlan",
           "coordinate", "run_sharded", "serve"]  # fmt: skip

#: How long the measured start is set after the last worker is ready: time for every worker
#: to wake and reach its first send.
START_MARGIN = 0.5

#: Seconds between a worker's batches of progress and finished records.
PROGRESS_INTERVAL = 1.0


class LoadWorkersFailed(SGLangError):
    """The workers could not make the run (one never became ready)."""


#: ``(done, total, output_tokens, elapsed)``: a worker's progress, ``elapsed`` seconds since its
#: run started (so no clock is shared between hosts).
Counts = tuple[int, int, int, float]

#: A worker's news other than progress: ``("ready", None, None)`` once warmed up, then its
#: outcome: its kind ("ok", "stopped", "error", or "died" when it was lost), what it
#: recorded, and a message.
Outcome = tuple[Literal["ready", "ok", "stopped", "error", "died"], LoadRun | None, str | None]

#: What a worker sends its coordinator, in order: ``ready``, ``("progress", counts, records)``
#: batches (:class:`Relay`), and its :data:`Outcome` last.
Message = tuple[Literal["progress"], Counts, list[RequestRecord]] | Outcome


class Relay:
    """Sends a worker's finished measured records with its progress, at each progress tick.

    ``send`` (a pipe's) may block while the coordinator is busy, so every message goes out on
    the relay's own thread, one at a time, in order. :meth:`stop` returns once all are sent.
    A message that could not be sent (one that cannot be pickled, a broken pipe) is named
    in an error sent last, so the coordinator says why it misses records.
    """

    def __init__(self, send: Callable[[Message], object]) -> None:
        self._send = send
        self._records: list[RequestRecord] = []
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sglang-relay")
        self._sent: list[Future[object]] = []

    def finished(self, record: RequestRecord) -> None:
        """Keep a finished measured request for the next batch."""
        self._records.append(record)

    def progress(self, done: int, total: int, output_tokens: int, elapsed: float) -> None:
        """Send the progress and the records finished since the last batch (the callback)."""
        records, self._records = self._records, []
        self.send(("progress", (done, total, output_tokens, elapsed), records))

    def send(self, message: Message) -> None:
        """Send ``message`` after those before it (from any thread)."""
        self._sent.append(self._thread.submit(self._send, message))

    def stop(self) -> None:
        """Wait until every message is sent; then send an error if one could not be.

        After the outcome, the error changes nothing (the coordinator has the whole run);
        in its place, it fails the requests missing with the reason.
        """
        self._thread.shutdown()
        failed = [exc for exc in map(Future.exception, self._sent) if exc is not None]
        if failed:
            why = (
                "the load worker could not send its results to the coordinator: "
                f"{type(failed[0]).__name__}: {failed[0]}"
            )
            self._send(("error", None, why))


class ProgressSum:
    """The coordinator's view: each worker's latest counts and the records it has sent."""

    def __init__(self, callback: ProgressCallback | None, interval: float) -> None:
        self._report = GuardedProgress(callback)
        self.interval = interval
        self._last = 0.0
        #: Each worker's latest counts, ``elapsed`` turned into its start on this clock.
        self.counts: dict[int, Counts] = {}
        self.records: dict[int, list[RequestRecord]] = {}

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


@dataclass(frozen=True)
class RunPlan:
    """What every worker runs: the same generator options, workload and load."""

    #: :class:`~pytest_sglang.loadgen.runner.LoadGenerator`'s keyword arguments plus ``url``
    #: (picklable values only: no progress callback). Not in the repr: its headers carry the
    #: API key, and a traceback under ``pytest -l`` prints reprs.
    options: dict[str, Any] = field(repr=False)
    workload: Workload
    load: Load
    repeat: int = 0

    def shares(self, workers: int) -> tuple[int, ...]:
        """Each of at most ``workers`` workers' share of the slots (concurrency or cap)."""
        slots = self.load.slots or workers
        return tuple(slot_shares(slots, max(1, min(workers, slots))))


class Coordination(TypedDict, total=False):
    """What the coordinator does around a run (see :func:`coordinate`)."""

    ready_timeout: float
    before_measured: Callable[[], object] | None
    progress: ProgressCallback | None
    interrupted: Callable[[LoadRun], object] | None


class Workers(Protocol):
    """The workers a coordinator drives (``name`` in messages): processes, or Ray actors."""

    name: str

    def receive(self, pending: set[int]) -> list[tuple[int, Message]]:
        """Wait a moment; return what the ``pending`` workers sent, as ``(worker, message)``.

        A worker that was lost sends ``("died", None, why)``.
        """

    def start(self, margin: float) -> Sequence[float]:
        """Release every worker to start its measured requests ``margin`` seconds from now.

        Return each worker's clock offset: what to add to this process's ``perf_counter`` to
        get the worker's (its records are moved onto this clock when they merge).
        """

    def kill(self, index: int) -> str:
        """Kill worker ``index`` (out of time) and return its description."""


def serve(
    index: int,
    shares: tuple[int, ...],
    plan: RunPlan,
    send: Callable[[Message], object],
    wait_start: Callable[[], float],
) -> None:  # pragma: no cover - runs in a worker; covered end to end
    """Run worker ``index``'s shard of ``plan`` here, sending each :data:`Message` to ``send``.

    ``wait_start`` blocks until the coordinator's common start and returns it (this clock).
    ``send`` is called from one thread at a time. Nothing is raised: an error is an
    outcome, with what had finished.
    """

    def sync() -> float:
        relay.send(("ready", None, None))  # after the warm-up's progress
        return wait_start()

    relay = Relay(send)
    generator = LoadGenerator(
        **plan.options,
        progress=relay.progress,
        progress_interval=PROGRESS_INTERVAL,
        shard=Shard(index, shares, sync, relay.finished),
    )
    try:  # the outcome goes after every batch
        run = run_blocking(generator.run(plan.workload, plan.load, repeat=plan.repeat))
        relay.send(("ok", run, None))
    except ServerStoppedAnswering as exc:
        relay.send(("stopped", exc.run, str(exc)))
    except BaseException as exc:  # the coordinator reports it; nothing is lost silently
        relay.send(("error", generator.interrupted_run, f"{type(exc).__name__}: {exc}"))
    relay.stop()


def coordinate(
    plan: RunPlan,
    shares: tuple[int, ...],
    workers: Workers,
    *,
    ready_timeout: float = 600.0,
    before_measured: Callable[[], object] | None = None,
    progress: ProgressCallback | None = None,
    interrupted: Callable[[LoadRun], object] | None = None,
) -> LoadRun:
    """Drive ``workers`` (one per share) through a run of ``plan`` and merge their records.

    Every worker warms up within ``ready_timeout`` s, then ``before_measured`` is called (where
    ``sglang_bench`` reads the server's counters) and they start together. Workers still
    running after the request timeout per request, plus a minute, are killed and their
    requests recorded as failed. ``progress`` hears the summed progress. A run cut short here
    (a test timeout, Ctrl-C) hands ``interrupted`` its finished part, the records received
    (the requests never sent are no failures), and propagates.

    :raises LoadWorkersFailed: a worker never became ready (no measured request was sent).
    :raises ServerStoppedAnswering: a worker gave up on the server (as a single process).
    """
    heard = ProgressSum(progress, PROGRESS_INTERVAL)
    everyone = set(range(len(shares)))

    def receive(pending: set[int]) -> dict[int, Outcome]:
        outcomes = {}
        for i, message in workers.receive(pending):
            if message[0] == "progress":
                heard.add(i, message[1], message[2])
            else:
                outcomes[i] = message
        return outcomes

    ready: set[int] = set()
    deadline = time.monotonic() + ready_timeout
    while pending := everyone - ready:
        if time.monotonic() > deadline:
            raise LoadWorkersFailed(
                f"{workers.name}s {sorted(pending)} were not ready within {ready_timeout:g} s; "
                "no measured request was sent"
            )
        for i, (kind, _, message) in receive(pending).items():
            if kind != "ready":
                raise LoadWorkersFailed(
                    f"{workers.name} {i} ended before its measured requests ({kind}: {message}); "
                    "no measured request was sent"
                )
            ready.add(i)
    if before_measured is not None:
        before_measured()
    offsets = workers.start(START_MARGIN)
    outcomes: dict[int, Outcome] = {}
    timeout = float(plan.options.get("request_timeout", 600.0)) * (plan.workload.requests + 1) + 60
    deadline = time.monotonic() + timeout
    try:
        while pending := everyone - outcomes.keys():
            outcomes.update(receive(pending))
            if time.monotonic() > deadline:
                for i in pending - outcomes.keys():
                    late = f"{workers.kill(i)} did not finish in {timeout:g} s and was killed"
                    outcomes[i] = ("died", None, late)
    except BaseException:
        if interrupted is not None:
            interrupted(_settle(plan, shares, outcomes, heard, offsets))
        raise
    merged = _settle(plan, shares, outcomes, heard, offsets)
    stopped = [message for kind, _, message in outcomes.values() if kind == "stopped"]
    if stopped:
        unsent = plan.workload.requests - len(merged.measured)
        raise ServerStoppedAnswering(stopped[0] or "the server stopped answering", merged, unsent)
    return merged


def _settle(
    plan: RunPlan,
    shares: tuple[int, ...],
    outcomes: dict[int, Outcome],
    heard: ProgressSum,
    offsets: Sequence[float],
) -> LoadRun:
    # A worker lost without a run keeps the records it handed over (``heard``); a measured
    # request a lost or failed worker owned and did not record is a failed record. A worker
    # with no outcome yet (the run was cut) is as it said last, "ready": it keeps what it
    # handed over too, and what it did not send is no record. Every record moves onto this
    # process's clock (``offsets``) as it merges.
    heard.report()
    w = plan.workload
    records: list[RequestRecord] = []
    starts: list[float] = []
    for index, offset in enumerate(offsets):
        kind, run, message = outcomes.get(index, ("ready", None, None))
        theirs = heard.records.get(index, []) if run is None else run.records  # on its clock
        kept = tuple(r.shifted(-offset) for r in theirs)  # on this one
        records += kept
        starts += [r.started for r in kept] if run is None else [run.started - offset]
        if kind in {"died", "error"}:
            sent = {r.index for r in kept if not r.warmup}
            now = time.perf_counter()
            failed = message or "load worker failed"
            records += [
                RequestRecord(i, False, w.input_len, w.output_len, now, now, end=now, error=failed)
                for i in range(w.requests)
                # Requests follow their sessions (a request is a session of one turn).
                if i not in sent and owner(w.session(i)[0], shares) == index
            ]
    records.sort(key=lambda r: (not r.warmup, r.index))
    # The busiest worker is the one that bounds the run: its CPU and its loop's lag.
    clients = [run.client for _, run, _ in outcomes.values() if run is not None and run.client]
    busiest = max(clients, key=lambda load: load.cpu_fraction, default=None)
    if busiest is not None:
        busiest = replace(busiest, lag_max=max(c.lag_max for c in clients))
    started = min(starts, default=time.perf_counter())
    return LoadRun(w, plan.load, tuple(records), started, plan.repeat, busiest)


class _Processes:
    """Worker processes on this host (``spawn``), one per share, each running :func:`serve`."""

    name = "load worker"

    def __init__(self) -> None:
        self._pipes: list[Connection] = []
        self._processes: list[BaseProcess] = []

    def launch(self, plan: RunPlan, shares: tuple[int, ...]) -> None:
        """Start one process per share."""
        context = multiprocessing.get_context("spawn")
        for index in range(len(shares)):
            pipe, theirs = context.Pipe()
            # The worker's end of its pipe: it sends its messages, and receives the start.
            args = (index, shares, plan, theirs.send, theirs.recv)
            name = f"sglang-loadgen-{index}"
            process = context.Process(target=serve, args=args, name=name, daemon=True)
            process.start()
            theirs.close()
            self._pipes.append(pipe)
            self._processes.append(process)

    def receive(self, pending: set[int]) -> list[tuple[int, Message]]:
        messages = []
        waiting = {self._pipes[i]: i for i in pending}
        for pipe in cast("list[Connection]", wait(list(waiting), timeout=0.2)):
            i = waiting[pipe]
            try:
                messages.append((i, pipe.recv()))
            except EOFError:  # it died while sending, or before
                process = self._processes[i]
                process.join(timeout=1)
                died = f"load worker {i} (pid {process.pid}) died with exit code {process.exitcode}"
                messages.append((i, ("died", None, died)))
        return messages

    def start(self, margin: float) -> Sequence[float]:
        at = time.perf_counter() + margin  # on the clock every process of a host shares
        for pipe in self._pipes:
            with contextlib.suppress(OSError):  # one gone: receive tells
                pipe.send(at)
        return [0.0] * len(self._pipes)

    def kill(self, index: int) -> str:
        self._processes[index].kill()
        return f"load worker {index}"

    def close(self) -> None:
        """End every process (one waiting for the start, too)."""
        for process in self._processes:
            process.kill()  # nothing, for one that ended
            process.join(timeout=10)


def run_sharded(plan: RunPlan, processes: int, **coordination: Unpack[Coordination]) -> LoadRun:
    """Run ``plan`` on ``processes`` processes here (:func:`coordinate`); all gone after."""
    check_count("processes", processes)
    shares = plan.shares(processes)
    workers = _Processes()
    try:
        workers.launch(plan, shares)
        return coordinate(plan, shares, workers, **coordination)
    finally:
        workers.close()
