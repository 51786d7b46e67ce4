"""A run spread over several load-generator workers: the coordinator, and processes on this host.

One asyncio process saturates one core. Every worker, a process of :func:`run_sharded` or a
Ray actor (:mod:`~pytest_sglang.loadgen.ray_workers`), runs :func:`run_shard` on its
:class:`~pytest_sglang.loadgen.shard.Shard` of the plan; :func:`coordinate` drives either kind
through the warm-up, the common start and the run, and :func:`settle` merges their records
into one :class:`LoadRun`. The guarantees (exact total concurrency, a common start, a lost
worker costs only its unsent requests) are in ``docs/scaling.md``.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any, Protocol, TypedDict, Unpack, cast

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.relay import ProgressSum, Relay, Sender
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering, run_blocking
from pytest_sglang.loadgen.schedule import Load, check_count, run_fields
from pytest_sglang.loadgen.shard import Shard, owner, slot_shares
from pytest_sglang.loadgen.workload import Workload

__all__ = ["Coordination", "LoadWorkersFailed", "RunPlan", "coordinate", "run_shard", "run_sharded"]

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

    def timeout(self) -> float:
        """Seconds the measured phase may take: the request timeout per request, plus a minute."""
        return float(self.options.get("request_timeout", 600.0)) * (self.workload.requests + 1) + 60

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
    """The workers a coordinator drives: processes on this host, or Ray actors."""

    #: What one is called in messages, e.g. ``"load worker"``.
    name: str

    def ready(self, pending: set[int]) -> set[int]:
        """Wait a moment; return those of ``pending`` whose warm-up is over.

        :raises LoadWorkersFailed: one of them was lost or ended before its start.
        """

    def start(self, at: float) -> None:
        """Release every worker to start its measured requests at ``at`` (this clock)."""

    def receive(self, pending: set[int], heard: ProgressSum) -> dict[int, Outcome]:
        """Wait a moment; hand progress to ``heard``; return the outcomes that came."""

    def kill(self, index: int) -> str:
        """Kill worker ``index`` (it ran out of time) and return its description."""


def run_shard(plan: RunPlan, shard: Shard, relay: Relay) -> Outcome:
    """Run one worker's ``shard`` of ``plan`` in this process: what every worker does.

    Its progress and finished records go to ``relay``. Nothing is raised: an error is an
    outcome, with what had finished.
    """
    options = dict(plan.options)
    generator = LoadGenerator(
        options.pop("url"),
        **options,
        progress=relay.progress,
        progress_interval=PROGRESS_INTERVAL,
        shard=replace(shard, finished=relay.finished),
    )
    try:
        return "ok", run_blocking(generator.run(plan.workload, plan.load, repeat=plan.repeat)), None
    except ServerStoppedAnswering as exc:
        return "stopped", exc.run, str(exc)
    except BaseException as exc:  # the coordinator reports it; nothing is lost silently
        return "error", generator.interrupted_run, f"{type(exc).__name__}: {exc}"


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

    :param ready_timeout: seconds for every worker to start and finish its warm-up.
    :param run_timeout: seconds for the measured phase (default: :meth:`RunPlan.timeout`),
        after which workers still running are killed and their requests recorded as failed.
    :param before_measured: called once every worker finished its warm-up, right before the
        common start (where ``sglang_bench`` reads the server's counters).
    :param progress: hears the workers' summed progress at most every ``PROGRESS_INTERVAL``.
    :raises LoadWorkersFailed: a worker never became ready (no measured request was sent).
    :raises ServerStoppedAnswering: a worker gave up on the server (as a single process).
    """
    pending = set(range(len(shares)))
    deadline = time.monotonic() + ready_timeout
    while pending:
        pending -= workers.ready(pending)
        if pending and time.monotonic() > deadline:
            raise LoadWorkersFailed(
                f"{workers.name}s {sorted(pending)} were not ready within {ready_timeout:g} s; "
                "no measured request was sent"
            )
    if before_measured is not None:
        before_measured()
    workers.start(time.perf_counter() + START_MARGIN)
    heard = ProgressSum(progress, PROGRESS_INTERVAL)
    outcomes: dict[int, Outcome] = {}
    timeout = run_timeout or plan.timeout()
    deadline = time.monotonic() + timeout
    while pending := set(range(len(shares))) - set(outcomes):
        outcomes.update(workers.receive(pending, heard))
        if time.monotonic() > deadline:
            for i in pending - set(outcomes):
                late = f"{workers.kill(i)} did not finish in {timeout:g} s and was killed"
                outcomes[i] = ("died", None, late)
    return settle(plan, shares, [outcomes[i] for i in range(len(shares))], heard)


def settle(
    plan: RunPlan, shares: tuple[int, ...], outcomes: Sequence[Outcome], heard: ProgressSum
) -> LoadRun:
    """Merge the workers' outcomes into one run.

    A worker lost without a run keeps the records it handed over before (``heard``); one
    that ``died`` or ended in an ``error`` has every measured request it owned and did not
    record made a failed record carrying its message.

    :raises ServerStoppedAnswering: a worker gave up on the server (as a single process).
    """
    heard.report()
    records: list[RequestRecord] = []
    starts: list[float] = []
    for index, (kind, run, message) in enumerate(outcomes):
        kept = tuple(heard.received(index)) if run is None else run.records
        records += kept
        starts += [r.started for r in kept] if run is None else [run.started]
        if kind in {"died", "error"}:
            sent = {r.index for r in kept if not r.warmup}
            now = time.perf_counter()
            records += [
                RequestRecord(
                    index=i,
                    warmup=False,
                    input_len=plan.workload.input_len,
                    output_len=plan.workload.output_len,
                    started=now,
                    sent=now,
                    end=now,
                    error=message or "load worker failed",
                )
                for i in range(plan.workload.requests)
                if owner(i, list(shares)) == index and i not in sent
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
        **run_fields(plan.load),
    )
    stopped = [message for kind, _, message in outcomes if kind == "stopped"]
    if stopped:
        unsent = plan.workload.requests - len(merged.measured)
        raise ServerStoppedAnswering(stopped[0] or "the server stopped answering", merged, unsent)
    return merged


def _worker(
    index: int,
    shares: tuple[int, ...],
    plan: RunPlan,
    ready: multiprocessing.Queue[int],
    go: Event,
    start_at: Synchronized[float],
    results: Connection,
) -> None:  # pragma: no cover - runs in a worker process; covered end to end
    def sync() -> float:
        ready.put(index)
        go.wait()
        if start_at.value <= 0:
            raise LoadWorkersFailed("the run was called off: another worker is gone")
        return float(start_at.value)

    relay = Relay()
    sender = Sender(relay, results.send, PROGRESS_INTERVAL)
    outcome = run_shard(plan, Shard(index, shares, sync), relay)
    sender.stop()  # every batch before the outcome
    results.send(outcome)
    results.close()


class _Processes:
    """Worker processes on this host (``spawn``), one per share, each running :func:`_worker`."""

    name = "load worker"

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")
        self._ready: multiprocessing.Queue[int] = self._context.Queue()
        self._go = self._context.Event()
        self._start_at: Synchronized[float] = self._context.Value("d", 0.0)
        self._pipes: list[Connection] = []
        self._processes: list[BaseProcess] = []

    def launch(self, plan: RunPlan, shares: tuple[int, ...]) -> None:
        """Start one process per share."""
        for index in range(len(shares)):
            receive, send = self._context.Pipe(duplex=False)
            process = self._context.Process(
                target=_worker,
                args=(index, shares, plan, self._ready, self._go, self._start_at, send),
                name=f"sglang-loadgen-{index}",
                daemon=True,
            )
            process.start()
            send.close()
            self._pipes.append(receive)
            self._processes.append(process)

    def ready(self, pending: set[int]) -> set[int]:
        try:
            return {self._ready.get(timeout=0.2)}
        except queue.Empty:
            pass
        for i in sorted(pending):
            if not self._processes[i].is_alive():
                raise LoadWorkersFailed(
                    f"load worker {i} exited with code {self._processes[i].exitcode} before its "
                    "measured requests; no measured request was sent"
                )
        return set()

    def start(self, at: float) -> None:
        self._start_at.value = at
        self._go.set()

    def receive(self, pending: set[int], heard: ProgressSum) -> dict[int, Outcome]:
        outcomes: dict[int, Outcome] = {}
        waiting = {self._pipes[i]: i for i in pending}
        for pipe in cast("list[Connection]", wait(list(waiting), timeout=0.2)):
            i = waiting[pipe]
            try:
                message = pipe.recv()
            except EOFError:  # it died while sending, or before
                process = self._processes[i]
                process.join(timeout=1)
                outcomes[i] = (
                    "died",
                    None,
                    f"load worker {i} (pid {process.pid}) died with exit code {process.exitcode}",
                )
                continue
            if message[0] == "progress":
                heard.add(i, message[1], message[2])
            else:
                outcomes[i] = message
        return outcomes

    def kill(self, index: int) -> str:
        self._processes[index].kill()
        return f"load worker {index}"

    def close(self) -> None:
        """Call off a run not started (``start_at`` stays 0) and end every process."""
        self._go.set()
        for process in self._processes:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)


def run_sharded(plan: RunPlan, processes: int, **coordination: Unpack[Coordination]) -> LoadRun:
    """Run ``plan`` on ``processes`` worker processes on this host and merge their records.

    ``coordination`` is :func:`coordinate`'s; every process is gone when this returns.
    """
    check_count("processes", processes)
    shares = plan.shares(processes)
    workers = _Processes()
    try:
        workers.launch(plan, shares)
        return coordinate(plan, shares, workers, **coordination)
    finally:
        workers.close()
