"""A run spread over several load-generator workers: the coordinator, and processes on this host.

One asyncio process saturates one core. Every worker, a process of :func:`run_sharded` or a
Ray actor (:mod:`~pytest_sglang.loadgen.ray_workers`), runs :func:`serve` on its
:class:`~pytest_sglang.loadgen.relay.Shard` and sends the same messages back;
:func:`coordinate` drives either kind and merges their records. The guarantees are in
``docs/scaling.md``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Protocol, TypedDict, Unpack, cast

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.relay import ProgressSum, Relay, Shard
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering, run_blocking
from pytest_sglang.loadgen.schedule import Load, owner, slot_shares
from pytest_sglang.loadgen.workload import Workload, check_count

__all__ = ["Coordination", "LoadWorkersFailed", "RunPlan", "coordinate", "run_sharded", "serve"]

#: How long the measured start is set after the last worker is ready: time for every worker
#: to wake and reach its first send.
START_MARGIN = 0.5

#: Seconds between a worker's batches of progress and finished records.
PROGRESS_INTERVAL = 1.0


class LoadWorkersFailed(SGLangError):
    """The workers could not make the run (one never became ready)."""


#: A worker's outcome: its kind ("ok", "stopped", "error", or "died" when it was lost), what
#: it recorded, and a message.
Outcome = tuple[str, LoadRun | None, str | None]

#: What a worker sends its coordinator, in order: ``("ready", None, None)`` once warmed up,
#: ``("progress", counts, records)`` batches (:mod:`~.relay`), and its :data:`Outcome` last.
Message = tuple[str, Any, Any]


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
    run_timeout: float | None
    before_measured: Callable[[], object] | None
    progress: ProgressCallback | None


class Workers(Protocol):
    """The workers a coordinator drives (``name`` in messages): processes, or Ray actors."""

    name: str

    def receive(self, pending: set[int]) -> list[tuple[int, Message]]:
        """Wait a moment; return what the ``pending`` workers sent, as ``(worker, message)``.

        A worker that was lost sends ``("died", None, why)``.
        """

    def start(self, margin: float) -> None:
        """Release every worker to start its measured requests ``margin`` seconds from now."""

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
    options = dict(plan.options)
    generator = LoadGenerator(
        options.pop("url"),
        **options,
        progress=relay.progress,
        progress_interval=PROGRESS_INTERVAL,
        shard=Shard(index, shares, sync, relay.finished),
    )
    outcome: Outcome
    try:
        run = run_blocking(generator.run(plan.workload, plan.load, repeat=plan.repeat))
        outcome = ("ok", run, None)
    except ServerStoppedAnswering as exc:
        outcome = ("stopped", exc.run, str(exc))
    except BaseException as exc:  # the coordinator reports it; nothing is lost silently
        outcome = ("error", generator.interrupted_run, f"{type(exc).__name__}: {exc}")
    relay.send(outcome)  # after every batch
    relay.stop()


def coordinate(
    plan: RunPlan,
    shares: tuple[int, ...],
    workers: Workers,
    *,
    ready_timeout: float = 600.0,
    run_timeout: float | None = None,
    before_measured: Callable[[], object] | None = None,
    progress: ProgressCallback | None = None,
) -> LoadRun:
    """Drive ``workers`` (one per share) through a run of ``plan`` and merge their records.

    Every worker warms up within ``ready_timeout`` s, then ``before_measured`` is called (where
    ``sglang_bench`` reads the server's counters) and they start together. Workers still
    running after ``run_timeout`` (default: the request timeout per request) are killed and
    their requests recorded as failed. ``progress`` hears the summed progress.

    :raises LoadWorkersFailed: a worker never became ready (no measured request was sent).
    :raises ServerStoppedAnswering: a worker gave up on the server (as a single process).
    """
    heard = ProgressSum(progress, PROGRESS_INTERVAL)

    def receive(pending: set[int]) -> dict[int, Outcome]:
        outcomes = {}
        for i, message in workers.receive(pending):
            if message[0] == "progress":
                heard.add(i, message[1], message[2])
            else:
                outcomes[i] = message
        return outcomes

    pending = set(range(len(shares)))
    deadline = time.monotonic() + ready_timeout
    while pending:
        for i, (kind, _, message) in receive(pending).items():
            if kind != "ready":
                raise LoadWorkersFailed(
                    f"{workers.name} {i} ended before its measured requests ({kind}: {message}); "
                    "no measured request was sent"
                )
            pending.discard(i)
        if pending and time.monotonic() > deadline:
            raise LoadWorkersFailed(
                f"{workers.name}s {sorted(pending)} were not ready within {ready_timeout:g} s; "
                "no measured request was sent"
            )
    if before_measured is not None:
        before_measured()
    workers.start(START_MARGIN)
    outcomes: dict[int, Outcome] = {}
    # By default the request timeout per request, plus a minute.
    per_request = float(plan.options.get("request_timeout", 600.0))
    timeout = run_timeout or per_request * (plan.workload.requests + 1) + 60
    deadline = time.monotonic() + timeout
    while pending := set(range(len(shares))) - set(outcomes):
        outcomes.update(receive(pending))
        if time.monotonic() > deadline:
            for i in pending - set(outcomes):
                late = f"{workers.kill(i)} did not finish in {timeout:g} s and was killed"
                outcomes[i] = ("died", None, late)
    return _settle(plan, shares, [outcomes[i] for i in range(len(shares))], heard)


def _settle(
    plan: RunPlan, shares: tuple[int, ...], outcomes: Sequence[Outcome], heard: ProgressSum
) -> LoadRun:
    # A worker lost without a run keeps the records it handed over (``heard``); a measured
    # request a lost or failed worker owned and did not record is a failed record.
    heard.report()
    w = plan.workload
    records: list[RequestRecord] = []
    starts: list[float] = []
    for index, (kind, run, message) in enumerate(outcomes):
        kept = tuple(heard.received(index)) if run is None else run.records
        records += kept
        starts += [r.started for r in kept] if run is None else [run.started]
        if kind in {"died", "error"}:
            sent = {r.index for r in kept if not r.warmup}
            # Requests follow their sessions (a request is a session of one turn).
            owned = [i for i in range(w.requests) if owner(w.session(i)[0], shares) == index]
            mine = [i for i in owned if i not in sent]
            now = time.perf_counter()
            failed = message or "load worker failed"
            records += [
                RequestRecord(i, False, w.input_len, w.output_len, now, now, end=now, error=failed)
                for i in mine
            ]
    records.sort(key=lambda r: (not r.warmup, r.index))
    # The busiest worker is the one that bounds the run: its CPU and its loop's lag.
    clients = [run.client for _, run, _ in outcomes if run is not None and run.client]
    busiest = max(clients, key=lambda load: load.cpu_fraction, default=None)
    if busiest is not None:
        busiest = replace(busiest, lag_max=max(c.lag_max for c in clients))
    merged = LoadRun(
        workload=plan.workload,
        records=tuple(records),
        started=min(starts, default=time.perf_counter()),
        repeat=plan.repeat,
        client=busiest,
        load=plan.load,
    )
    stopped = [message for kind, _, message in outcomes if kind == "stopped"]
    if stopped:
        unsent = plan.workload.requests - len(merged.measured)
        raise ServerStoppedAnswering(stopped[0] or "the server stopped answering", merged, unsent)
    return merged


def _worker(
    index: int, shares: tuple[int, ...], plan: RunPlan, pipe: Connection
) -> None:  # pragma: no cover - runs in a worker process; covered end to end
    serve(index, shares, plan, pipe.send, lambda: float(pipe.recv()))
    pipe.close()


class _Processes:
    """Worker processes on this host (``spawn``), one per share, each running :func:`_worker`."""

    name = "load worker"

    def __init__(self) -> None:
        self._pipes: list[Connection] = []
        self._processes: list[BaseProcess] = []

    def launch(self, plan: RunPlan, shares: tuple[int, ...]) -> None:
        """Start one process per share."""
        context = multiprocessing.get_context("spawn")
        for index in range(len(shares)):
            pipe, theirs = context.Pipe()
            process = context.Process(
                target=_worker,
                args=(index, shares, plan, theirs),
                name=f"sglang-loadgen-{index}",
                daemon=True,
            )
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

    def start(self, margin: float) -> None:
        at = time.perf_counter() + margin  # on the clock every process of a host shares
        for pipe in self._pipes:
            with contextlib.suppress(OSError):  # one gone: receive tells
                pipe.send(at)

    def kill(self, index: int) -> str:
        self._processes[index].kill()
        return f"load worker {index}"

    def close(self) -> None:
        """End every process (one waiting for the start, too)."""
        for process in self._processes:
            if process.is_alive():
                process.kill()
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
