"""A run spread over several load-generator workers: processes on this host, and the merge.

One asyncio process saturates one core. :func:`run_sharded` starts worker processes
(``spawn``); every worker, process or Ray actor, runs :func:`run_shard` on its
:class:`~pytest_sglang.loadgen.shard.Shard` of the plan, and :func:`settle` merges their
records into one :class:`LoadRun`. The guarantees (exact total concurrency, a common start,
a lost worker costs only its unsent requests) are in ``docs/scaling.md``.
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
from typing import Any, cast

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.relay import ProgressSum, Relay, Sender
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering, run_blocking
from pytest_sglang.loadgen.saturation import ClientLoad
from pytest_sglang.loadgen.schedule import Load, run_fields
from pytest_sglang.loadgen.shard import Shard, owner, slot_shares
from pytest_sglang.loadgen.workload import Workload

__all__ = [
    "LoadWorkersFailed",
    "RunPlan",
    "merge_outcomes",
    "plan_shares",
    "run_shard",
    "run_sharded",
    "settle",
]

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

    @property
    def mode(self) -> str:
        """The load's mode, ``"closed"`` or ``"open"``."""
        return self.load.mode

    @property
    def rate(self) -> float | None:
        """An open loop's rate (requests per second)."""
        return self.load.rate

    @property
    def max_concurrency(self) -> int | None:
        """An open loop's cap on the requests in flight."""
        return self.load.max_concurrency

    def timeout(self) -> float:
        """Seconds the measured phase may take: the request timeout per request, plus a minute."""
        return float(self.options.get("request_timeout", 600.0)) * (self.workload.requests + 1) + 60


def run_shard(plan: RunPlan, shard: Shard, relay: Relay) -> Outcome:
    """Run one worker's ``shard`` of ``plan`` in this process: what every worker does.

    The generator is built from the plan's options; it hands its progress and finished
    records to ``relay``. Nothing is raised: an error is an outcome, with what had finished.
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


def plan_shares(plan: RunPlan, processes: int) -> tuple[int, ...]:
    """Each worker's share of the plan's slots (closed-loop concurrency or open-loop cap)."""
    slots = plan.load.slots or processes
    count = max(1, min(processes, slots))
    return tuple(slot_shares(slots, count))


def _failed(workload: Workload, indices: Sequence[int], message: str) -> list[RequestRecord]:
    now = time.perf_counter()
    return [
        RequestRecord(
            index=i,
            warmup=False,
            input_len=workload.input_len,
            output_len=workload.output_len,
            started=now,
            sent=now,
            end=now,
            error=message,
        )
        for i in indices
    ]


def _merge_client(loads: Sequence[ClientLoad | None]) -> ClientLoad | None:
    # The busiest worker is the one that bounds the run: its CPU and its loop's lag.
    seen = [load for load in loads if load is not None]
    if not seen:
        return None
    busiest = max(seen, key=lambda load: load.cpu_fraction)
    return replace(busiest, lag_max=max(load.lag_max for load in seen))


def run_sharded(
    plan: RunPlan,
    processes: int,
    *,
    ready_timeout: float = 600.0,
    run_timeout: float | None = None,
    before_measured: Callable[[], object] | None = None,
    progress: ProgressCallback | None = None,
) -> LoadRun:
    """Run ``plan`` on ``processes`` worker processes and merge their records.

    ``plan.options`` are :class:`~pytest_sglang.loadgen.runner.LoadGenerator`'s keyword
    arguments plus ``url`` (picklable values only: no progress callback).

    :param ready_timeout: seconds for every worker to start and finish its warm-up.
    :param run_timeout: seconds for the measured phase (default: the plan's request timeout
        times the requests, plus a minute), after which workers still running are killed
        and their requests recorded as failed.
    :param before_measured: called here once every worker finished its warm-up, right before
        the common start (where ``sglang_bench`` reads the server's counters).
    :param progress: called here with the workers' summed progress (requests done and
        tokens received, warm-up included) at most every ``PROGRESS_INTERVAL`` seconds.
    :raises LoadWorkersFailed: a worker never became ready (no measured request was sent).
    """
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    context = multiprocessing.get_context("spawn")
    shares = plan_shares(plan, processes)
    ready: multiprocessing.Queue[int] = context.Queue()
    go = context.Event()
    start_at: Synchronized[float] = context.Value("d", 0.0)
    pipes: list[Connection] = []
    workers: list[BaseProcess] = []
    try:
        for index in range(len(shares)):
            receive, send = context.Pipe(duplex=False)
            process = context.Process(
                target=_worker,
                args=(index, shares, plan, ready, go, start_at, send),
                name=f"sglang-loadgen-{index}",
                daemon=True,
            )
            process.start()
            send.close()
            pipes.append(receive)
            workers.append(process)
        _await_ready(workers, ready, go, start_at, ready_timeout, before_measured)
        heard = ProgressSum(progress, PROGRESS_INTERVAL)
        outcomes = _collect(workers, pipes, run_timeout or plan.timeout(), heard)
    finally:
        go.set()  # a worker still waiting is released (to call the run off)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
            worker.join(timeout=10)
    return settle(plan, shares, outcomes, heard)


def _await_ready(
    workers: Sequence[BaseProcess],
    ready: multiprocessing.Queue[int],
    go: Event,
    start_at: Synchronized[float],
    timeout: float,
    before_measured: Callable[[], object] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    pending = set(range(len(workers)))
    while pending:
        try:
            pending.discard(ready.get(timeout=0.2))
            continue
        except queue.Empty:
            pass
        dead = [i for i in pending if not workers[i].is_alive()]
        if dead or time.monotonic() > deadline:
            go.set()  # start_at stays 0: the others call the run off
            why = (
                f"load worker {dead[0]} exited with code {workers[dead[0]].exitcode} before "
                "its measured requests"
                if dead
                else f"load workers {sorted(pending)} were not ready within {timeout:g} s"
            )
            raise LoadWorkersFailed(f"{why}; no measured request was sent")
    if before_measured is not None:
        before_measured()
    start_at.value = time.perf_counter() + START_MARGIN
    go.set()


def _collect(
    workers: Sequence[BaseProcess],
    pipes: Sequence[Connection],
    timeout: float,
    heard: ProgressSum,
) -> list[Outcome]:
    outcomes: list[Outcome | None] = [None] * len(workers)
    deadline = time.monotonic() + timeout
    while any(o is None for o in outcomes):
        waiting = {pipes[i]: i for i, o in enumerate(outcomes) if o is None}
        for pipe in cast("list[Connection]", wait(list(waiting), timeout=0.2)):
            i = waiting[pipe]
            try:
                message = pipe.recv()
            except EOFError:  # it died while sending, or before
                outcomes[i] = ("died", None, _death(workers[i], i))
                continue
            if message[0] == "progress":
                heard.add(i, message[1], message[2])
            else:
                outcomes[i] = message
        if time.monotonic() > deadline:
            for i, outcome in enumerate(outcomes):
                if outcome is None:
                    workers[i].kill()
                    outcomes[i] = ("died", None, f"load worker {i} did not finish in {timeout:g} s")
    return [o for o in outcomes if o is not None]


def _death(process: BaseProcess, index: int) -> str:
    process.join(timeout=1)
    return f"load worker {index} (pid {process.pid}) died with exit code {process.exitcode}"


def settle(
    plan: RunPlan, shares: tuple[int, ...], outcomes: Sequence[Outcome], heard: ProgressSum
) -> LoadRun:
    """Merge the workers' outcomes into one run, as :func:`merge_outcomes`.

    A worker that ``died`` keeps the records it handed over before (``heard``).

    :raises ServerStoppedAnswering: a worker gave up on the server (as a single process).
    """
    heard.report()
    kept: list[Outcome] = []
    for i, (kind, run, message) in enumerate(outcomes):
        records = heard.received(i)
        if kind == "died" and records:
            run = LoadRun(
                plan.workload, plan.load.mode, tuple(records), min(r.started for r in records)
            )
        kept.append((kind, run, message))
    merged = merge_outcomes(plan, shares, kept)
    stopped = [message for kind, _, message in kept if kind == "stopped"]
    if stopped:
        unsent = plan.workload.requests - len(merged.measured)
        raise ServerStoppedAnswering(stopped[0] or "the server stopped answering", merged, unsent)
    return merged


def merge_outcomes(plan: RunPlan, shares: tuple[int, ...], outcomes: Sequence[Outcome]) -> LoadRun:
    """Merge the workers' ``(kind, run, message)`` outcomes into one run.

    A worker that ``died`` or ended in an ``error`` has every measured request it owned and
    did not record made a failed record carrying its message.
    """
    records: list[RequestRecord] = []
    runs = [run for _, run, _ in outcomes if run is not None]
    for index, (kind, run, message) in enumerate(outcomes):
        if run is not None:
            records += run.records
        if kind in {"died", "error"}:
            sent = {r.index for r in (run.records if run else ()) if not r.warmup}
            mine = [
                i
                for i in range(plan.workload.requests)
                if owner(i, list(shares)) == index and i not in sent
            ]
            records += _failed(plan.workload, mine, message or "load worker failed")
    records.sort(key=lambda r: (not r.warmup, r.index))
    return LoadRun(
        workload=plan.workload,
        records=tuple(records),
        started=min((run.started for run in runs), default=time.perf_counter()),
        repeat=plan.repeat,
        client=_merge_client([run.client for run in runs]),
        **run_fields(plan.load),
    )
