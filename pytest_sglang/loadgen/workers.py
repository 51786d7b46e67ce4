"""A run spread over several load-generator processes on this host.

One asyncio process saturates one core (about 18,000 streamed tokens per second on the
development machine); past that its timings measure its own event loop. ``run_sharded``
starts ``processes`` worker processes (``spawn``: each its own interpreter, event loop and
connection pool), each running its :class:`~pytest_sglang.loadgen.shard.Shard` of one
closed loop (``C`` in flight in total) or one open-loop schedule. They warm up, report
ready, and start their measured requests together at a common ``perf_counter`` time (the
same clock in every process of a host); their records merge into one :class:`LoadRun`.

While the run goes on, each worker sends its finished measured requests and its progress
counts every ``PROGRESS_INTERVAL`` (:mod:`~pytest_sglang.loadgen.relay`): the coordinator
reports one progress line summed over the workers, and a worker that dies (crash, kill),
noticed by its exit and never waited for, loses only the requests it had not yet sent back:
those are recorded as failed with its exit code. A worker that does not report ready within
``ready_timeout`` is killed, and the run refused (no measured request is sent by anyone).
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any, Literal, cast

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.relay import ProgressSum, Relay, Sender
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering, run_blocking
from pytest_sglang.loadgen.saturation import ClientLoad
from pytest_sglang.loadgen.schedule import Arrival
from pytest_sglang.loadgen.shard import Shard, owner, slot_shares
from pytest_sglang.loadgen.workload import Workload

__all__ = [
    "LoadWorkersFailed",
    "RunPlan",
    "merge_outcomes",
    "plan_shares",
    "run_sharded",
    "sharded_closed_loop",
    "worker_generator",
]

#: How long the measured start is set after the last worker is ready: time for every worker
#: to wake and reach its first send (tens of ms on a loaded 2-core machine; 0.5 s is ample).
START_MARGIN = 0.5

#: Seconds between a worker's batches of progress and finished records.
PROGRESS_INTERVAL = 1.0


def _reduce_workload(workload: Workload) -> tuple[Any, tuple[dict[str, Any]]]:
    # A workload's ``extra`` is a read-only mapping, which pickle refuses: it travels to and
    # from the workers as its plain-JSON form.
    return Workload.from_dict, (workload.as_dict(),)


ForkingPickler.register(Workload, _reduce_workload)


class LoadWorkersFailed(SGLangError):
    """The worker processes could not make the run (one never became ready)."""


@dataclass(frozen=True)
class RunPlan:
    """What every worker runs: the same generator options, load shape and workload."""

    options: dict[str, Any]
    workload: Workload
    mode: Literal["closed", "open"]
    concurrency: int | None = None
    rate: float | None = None
    arrival: str = "poisson"
    max_concurrency: int | None = None
    repeat: int = 0


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
    generator = worker_generator(plan.options, Shard(index, shares, sync), relay)
    sender = Sender(relay, results.send, PROGRESS_INTERVAL)
    outcome: tuple[str, LoadRun | None, str | None]
    try:
        if plan.mode == "closed":
            assert plan.concurrency is not None
            run = run_blocking(
                generator.closed_loop(plan.workload, plan.concurrency, repeat=plan.repeat)
            )
        else:
            assert plan.rate is not None
            run = run_blocking(
                generator.open_loop(
                    plan.workload,
                    plan.rate,
                    arrival=cast("Arrival", plan.arrival),
                    max_concurrency=plan.max_concurrency,
                    repeat=plan.repeat,
                )
            )
        outcome = ("ok", run, None)
    except ServerStoppedAnswering as exc:
        outcome = ("stopped", exc.run, str(exc))
    except BaseException as exc:  # the coordinator reports it; nothing is lost silently
        # What had finished is kept (the rest of this worker's requests fail).
        outcome = ("error", generator.interrupted_run, f"{type(exc).__name__}: {exc}")
    sender.stop()  # every batch before the outcome
    results.send(outcome)
    results.close()


def worker_generator(options: dict[str, Any], shard: Shard, relay: Relay) -> LoadGenerator:
    """Return a worker's generator, built from the coordinator's options (``url`` included).

    It runs ``shard``, and hands its progress and finished records to ``relay``.
    """
    options = dict(options)
    return LoadGenerator(
        options.pop("url"), **options, progress=relay.progress,
        progress_interval=PROGRESS_INTERVAL, shard=replace(shard, finished=relay.finished),
    )  # fmt: skip


def plan_shares(plan: RunPlan, processes: int) -> tuple[int, ...]:
    """Each worker's share of the plan's slots (closed-loop concurrency or open-loop cap)."""
    if plan.mode == "closed":
        assert plan.concurrency is not None
        slots = plan.concurrency
    else:
        slots = plan.max_concurrency or processes
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
        timeout = (
            run_timeout
            or plan.options.get("request_timeout", 600.0) * (plan.workload.requests + 1) + 60.0
        )
        heard = ProgressSum(progress, PROGRESS_INTERVAL)
        outcomes = _collect(workers, pipes, timeout, heard)
        heard.report()
        # A lost worker's requests that it had sent back before its end are kept.
        outcomes = [
            (kind, _partial(plan, heard.received(i)), message) if kind == "died" else
            (kind, run, message)
            for i, (kind, run, message) in enumerate(outcomes)
        ]  # fmt: skip
    finally:
        go.set()  # a worker still waiting is released (to call the run off)
        for worker in workers:
            if worker.is_alive():
                worker.kill()
            worker.join(timeout=10)
    run = merge_outcomes(plan, shares, outcomes)
    stopped = [message for kind, _, message in outcomes if kind == "stopped"]
    if stopped:
        unsent = plan.workload.requests - len(run.measured)
        raise ServerStoppedAnswering(stopped[0] or "the server stopped answering", run, unsent)
    return run


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
) -> list[tuple[str, LoadRun | None, str | None]]:
    outcomes: list[tuple[str, LoadRun | None, str | None] | None] = [None] * len(workers)
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


def _partial(plan: RunPlan, records: Sequence[RequestRecord]) -> LoadRun | None:
    if not records:
        return None
    started = min(r.started for r in records)
    return LoadRun(plan.workload, plan.mode, tuple(records), started)


def _death(process: BaseProcess, index: int) -> str:
    process.join(timeout=1)
    return f"load worker {index} (pid {process.pid}) died with exit code {process.exitcode}"


def merge_outcomes(
    plan: RunPlan,
    shares: tuple[int, ...],
    outcomes: Sequence[tuple[str, LoadRun | None, str | None]],
) -> LoadRun:
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
                i for i in range(plan.workload.requests)
                if owner(i, list(shares)) == index and i not in sent
            ]  # fmt: skip
            records += _failed(plan.workload, mine, message or "load worker failed")
    records.sort(key=lambda r: (not r.warmup, r.index))
    return LoadRun(
        workload=plan.workload,
        mode=plan.mode,
        records=tuple(records),
        started=min((run.started for run in runs), default=time.perf_counter()),
        concurrency=plan.concurrency,
        rate=plan.rate,
        arrival=plan.arrival if plan.mode == "open" else None,
        max_concurrency=plan.max_concurrency,
        repeat=plan.repeat,
        client=_merge_client([run.client for run in runs]),
    )


def sharded_closed_loop(
    generator: LoadGenerator,
    workload: Workload,
    concurrency: int,
    processes: int,
    *,
    repeat: int = 0,
) -> LoadRun:
    """Run ``generator``'s closed loop at ``concurrency`` on ``processes`` worker processes.

    The workers build the same generator from :attr:`LoadGenerator.options` (URL, headers,
    timeouts; no progress callback).
    """
    plan = RunPlan(generator.options, workload, "closed", concurrency=concurrency, repeat=repeat)
    return run_sharded(plan, processes)
