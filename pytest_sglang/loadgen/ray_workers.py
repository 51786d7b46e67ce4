"""A run spread over load-generator workers on several hosts: Ray actors (``pytest-sglang[ray]``).

The workers of :mod:`~pytest_sglang.loadgen.workers` as Ray actors, with the same guarantees
(exact total concurrency, a common start, loss is failure) plus one time base: each actor's
clock offset is measured NTP-style before the run and its records are moved onto the
coordinator's clock. Ray is imported only when a run is made. See ``docs/scaling.md``.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Self

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.relay import Counts, ProgressSum, Relay
from pytest_sglang.loadgen.shard import Shard
from pytest_sglang.loadgen.workers import (
    PROGRESS_INTERVAL,
    START_MARGIN,
    LoadWorkersFailed,
    Outcome,
    RunPlan,
    plan_shares,
    run_shard,
    settle,
)

__all__ = ["CLOCK_ROUNDS", "ClockOffset", "RayLoadWorkers", "RayUnavailable"]

#: Seconds to wait for the cluster's address to take a TCP connection.
CONNECT_TIMEOUT = 5.0

#: Clock readings per actor before each run; the one with the shortest round trip is kept.
CLOCK_ROUNDS = 8


class RayUnavailable(SGLangError):
    """Ray is not installed, or the Ray cluster named could not be reached."""


@dataclass(frozen=True)
class ClockOffset:
    """How one actor's clock relates to the coordinator's, measured before a run."""

    #: The worker's index (its shard).
    worker: int
    #: The node the actor runs on (its IP address), its Ray node id and the actor's process.
    node: str
    node_id: str
    pid: int
    #: Seconds to add to a coordinator ``perf_counter`` reading to get the actor's.
    offset: float
    #: The round trip of the reading kept; the offset is wrong by at most half of it.
    round_trip: float

    @property
    def uncertainty(self) -> float:
        """The largest error of :attr:`offset`, in seconds (half the round trip)."""
        return self.round_trip / 2


def estimate_offset(samples: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """Return ``(offset, round_trip)`` from ``(t0, remote, t1)`` clock readings.

    ``t0`` and ``t1`` are the coordinator's clock right before asking and right after the
    answer, ``remote`` the other clock read in between. The reading with the shortest round
    trip bounds the error best: the remote reading was taken somewhere in ``[t0, t1]``, so
    ``remote - (t0 + t1) / 2`` is wrong by at most ``(t1 - t0) / 2``.
    """
    if not samples:
        raise ValueError("no clock readings")
    t0, remote, t1 = min(samples, key=lambda s: s[2] - s[0])
    return remote - (t0 + t1) / 2, t1 - t0


def shift_records(records: Sequence[RequestRecord], by: float) -> list[RequestRecord]:
    """Return copies of ``records`` with every timestamp moved by ``by`` seconds."""
    return [
        dataclasses.replace(
            record,
            started=record.started + by,
            sent=record.sent + by,
            scheduled=None if record.scheduled is None else record.scheduled + by,
            end=None if record.end is None else record.end + by,
            chunk_times=[t + by for t in record.chunk_times],
        )
        for record in records
    ]


def _shifted(run: LoadRun, by: float) -> LoadRun:
    return dataclasses.replace(
        run, started=run.started + by, records=tuple(shift_records(run.records, by))
    )


def import_ray() -> ModuleType:
    """Import Ray, or raise :class:`RayUnavailable` saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            f"Ray is not installed ({exc}): the load runs on Ray actors only with the "
            "optional extra: pip install 'pytest-sglang[ray]' (on every node of the cluster)"
        ) from exc
    return ray


def connect(address: str | None, *, source: str = "the address argument") -> ModuleType:
    """Connect this process to the Ray cluster at ``address`` (once) and return ``ray``.

    An already connected process (``ray.init`` called by the user) is used as it is. With no
    connection and no address this refuses: starting a private single-node Ray here would
    put every worker on this host, which is what the multi-process option is for.

    :param source: where the address came from, for the message (e.g. ``--sglang-ray-address``).
    :raises RayUnavailable: Ray is missing, or the cluster cannot be reached.
    """
    ray = import_ray()
    if ray.is_initialized():
        return ray
    if not address:
        raise RayUnavailable(
            "no Ray cluster to run the load workers on: give its address (-o sglang_ray_address="
            "HOST:PORT, ini sglang_ray_address, env PYTEST_SGLANG_RAY_ADDRESS; 'auto' finds the "
            "cluster this host belongs to), or call ray.init() first"
        )
    fix = (
        "check that the head node runs (`ray status` there), that the address is its GCS "
        "address HOST:PORT (what `ray start --head` printed, port 6379 by default) and that "
        "this host can reach it"
    )
    # Ray retries an unreachable GCS for minutes: a closed port is told at once instead.
    problem = unreachable(address)
    if problem is not None:
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {address!r} (from {source}): {problem}; {fix}"
        )
    try:
        ray.init(address=address, logging_level="WARNING", log_to_driver=False)
    except Exception as exc:  # ConnectionError, ValueError, RuntimeError: all mean unreachable
        raise RayUnavailable(
            f"cannot connect to the Ray cluster at {address!r} (from {source}): "
            f"{_reason(exc)}; {fix}"
        ) from exc
    return ray


def unreachable(address: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why ``address`` (``[ray://]HOST:PORT``) takes no TCP connection; ``None`` if it does.

    ``"auto"`` and other forms without a port are left to Ray.
    """
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return f"nothing answers on {host}:{port} ({exc.strerror or type(exc).__name__})"


class _LoadActor:  # pragma: no cover - runs inside a Ray actor; covered end to end
    """One worker: runs its shard of a plan, waiting for the coordinator's start."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._go = threading.Event()
        self._start = 0.0
        self._relay = Relay()

    def where(self) -> tuple[str, str, int]:
        """Return this actor's node address, Ray node id and process id."""
        import os

        import ray

        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        return ip, str(ray.get_runtime_context().get_node_id()), os.getpid()

    def clock(self) -> float:
        """Return this actor's ``perf_counter``."""
        return time.perf_counter()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the run's warm-up is over (the actor waits for the start)."""
        return self._ready.wait(timeout)

    def poll(self) -> tuple[Counts, list[RequestRecord]] | None:
        """Return the progress and the measured records finished since the last poll."""
        return self._relay.take()

    def go(self, start_at: float) -> None:
        """Start the measured requests at ``start_at`` (this actor's clock); 0 calls it off."""
        self._start = start_at
        self._go.set()

    def run(self, index: int, shares: tuple[int, ...], plan: RunPlan, wait_limit: float) -> Outcome:
        """Run shard ``index`` of ``plan`` (:func:`~.workers.run_shard`) and return its outcome."""
        self._ready.clear()
        self._go.clear()
        self._start = 0.0
        self._relay = Relay()

        def sync() -> float:
            self._ready.set()
            if not self._go.wait(wait_limit) or self._start <= 0:
                raise LoadWorkersFailed("the run was called off by the coordinator")
            return self._start

        return run_shard(plan, Shard(index, shares, sync), self._relay)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}".rstrip(": ")


class RayLoadWorkers:
    """``workers`` load-generator actors on a Ray cluster, reused from run to run.

    ::

        with RayLoadWorkers(2, address="head-node:6379") as workers:
            run = workers.run(RunPlan({"url": url}, workload, "closed", concurrency=256))

    :param workers: how many actors (at most the concurrency of a closed loop is used).
    :param address: the Ray cluster (``HOST:PORT`` of its head, or ``"auto"``); ``None`` uses
        the connection this process already has (``ray.init`` called before).
    :param source: where ``address`` came from, for messages.
    :param num_cpus: CPUs each actor reserves on its node (1: one event loop, one core).
    :param resources: custom Ray resources each actor asks for, to pin the workers to the
        nodes that offer them (``ray start --resources='{"loadgen": 4}'`` on client hosts).
    :param spread: place the actors on as many nodes as possible (Ray's ``SPREAD``
        strategy); ``False`` lets Ray pack them.
    """

    def __init__(
        self,
        workers: int,
        *,
        address: str | None = None,
        source: str = "the address argument",
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
        spread: bool = True,
    ) -> None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
        self.workers = workers
        self._ray = connect(address, source=source)
        self._options: dict[str, Any] = {
            "num_cpus": num_cpus,
            "max_concurrency": 4,  # run, wait_ready, clock and go at once
            "max_restarts": 0,
        }
        if resources:
            self._options["resources"] = dict(resources)
        if spread:
            self._options["scheduling_strategy"] = "SPREAD"
        self._actor_class = self._ray.remote(_LoadActor)
        self._actors: list[Any] = []
        self._where: list[tuple[str, str, int]] = []
        #: The clock offsets measured before the last run, one per actor that took part.
        self.clocks: tuple[ClockOffset, ...] = ()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the actors (the Ray connection stays: it is the process's)."""
        for actor in self._actors:
            try:
                self._ray.kill(actor, no_restart=True)
            except Exception:  # already gone with its node
                pass
        self._actors, self._where = [], []

    def _ensure(self, count: int, timeout: float) -> None:
        """Have ``count`` live actors, replacing any lost in an earlier run."""
        ray = self._ray
        while len(self._actors) < count:
            self._actors.append(self._actor_class.options(**self._options).remote())
            self._where.append(("?", "?", 0))
        refs = [actor.where.remote() for actor in self._actors]
        deadline = time.monotonic() + timeout
        for i, ref in enumerate(refs):
            try:
                self._where[i] = tuple(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
            except ray.exceptions.GetTimeoutError:
                self.close()
                raise LoadWorkersFailed(
                    f"Ray load worker {i} was not placed within {timeout:g} s: the cluster may "
                    f"lack free resources (each worker asks for {self._asks()}, {self.workers} "
                    "workers; see `ray status`); no request was sent"
                ) from None
            except ray.exceptions.RayError:  # lost since the last run: a fresh one
                self._actors[i] = self._actor_class.options(**self._options).remote()
                self._where[i] = tuple(ray.get(self._actors[i].where.remote(), timeout=timeout))

    def _asks(self) -> str:
        asks = {"CPU": self._options["num_cpus"], **self._options.get("resources", {})}
        return ", ".join(f"{k} {v:g}" for k, v in asks.items())

    def _clock(self, index: int) -> ClockOffset:
        actor = self._actors[index]
        samples = []
        for _ in range(CLOCK_ROUNDS):
            t0 = time.perf_counter()
            remote = self._ray.get(actor.clock.remote(), timeout=30)
            samples.append((t0, float(remote), time.perf_counter()))
        offset, round_trip = estimate_offset(samples)
        node, node_id, pid = self._where[index]
        return ClockOffset(index, node, node_id, pid, offset, round_trip)

    def run(
        self,
        plan: RunPlan,
        *,
        ready_timeout: float = 600.0,
        run_timeout: float | None = None,
        before_measured: Callable[[], object] | None = None,
        progress: ProgressCallback | None = None,
    ) -> LoadRun:
        """Run ``plan`` on the actors and return one merged :class:`LoadRun`.

        The arguments are :func:`~pytest_sglang.loadgen.workers.run_sharded`'s, for actors
        (``ready_timeout`` includes their placement). Records are on this process's
        ``perf_counter`` clock.

        :raises LoadWorkersFailed: an actor was not placed, or failed before the start (no
            measured request was sent).
        :raises ServerStoppedAnswering: an actor gave up on the server (as a single process).
        """
        ray = self._ray
        shares = plan_shares(plan, self.workers)
        count = len(shares)
        self.clocks = ()
        self._ensure(count, ready_timeout)
        actors = self._actors[:count]
        timeout = run_timeout or plan.timeout()
        runs = [
            actor.run.remote(i, shares, plan, ready_timeout + 60.0)
            for i, actor in enumerate(actors)
        ]
        outcomes: list[Outcome | None] = [None] * count
        try:
            self._await_ready(actors, runs, outcomes, ready_timeout)
            self.clocks = tuple(self._clock(i) for i in range(count))
            if before_measured is not None:
                before_measured()
            start = time.perf_counter() + START_MARGIN
            ray.get(
                [a.go.remote(start + c.offset) for a, c in zip(actors, self.clocks, strict=True)],
                timeout=30,
            )
            heard = ProgressSum(progress, PROGRESS_INTERVAL)
            self._collect(runs, outcomes, timeout, heard)
        except BaseException:
            # Nothing may keep loading the server after a refused or interrupted run: the
            # actors are killed (a later run makes fresh ones).
            self.close()
            raise
        # Each actor's records onto this process's clock (what it handed over already is).
        finished = zip([o for o in outcomes if o is not None], self.clocks, strict=True)
        shifted = [
            (kind, None if run is None else _shifted(run, -clock.offset), message)
            for (kind, run, message), clock in finished
        ]
        return settle(plan, shares, shifted, heard)

    def _describe(self, index: int, exc: BaseException) -> str:
        node, _, pid = self._where[index]
        return (
            f"Ray load worker {index} (node {node}, pid {pid}) was lost: {_reason(exc)} "
            "(its process was killed or its node left the cluster)"
        )

    def _await_ready(
        self,
        actors: Sequence[Any],
        runs: Sequence[Any],
        outcomes: list[Outcome | None],
        timeout: float,
    ) -> None:
        ray = self._ray
        # Each ref watched maps to its worker and what it is: "ready" (the warm-up is over)
        # or "run" (the run itself ended, or its actor died, before that).
        watched: dict[Any, tuple[int, str]] = {}
        for i, actor in enumerate(actors):
            watched[actor.wait_ready.remote(timeout)] = (i, "ready")
            watched[runs[i]] = (i, "run")
        todo = set(range(len(actors)))
        deadline = time.monotonic() + timeout
        while todo:
            watch = [ref for ref, (i, _) in watched.items() if i in todo]
            done, _ = ray.wait(watch, num_returns=1, timeout=0.5)
            for ref in done:
                i, what = watched.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    raise LoadWorkersFailed(
                        f"{self._describe(i, exc)} before its measured requests; no measured "
                        "request was sent"
                    ) from exc
                if what == "run":
                    kind, _, message = result
                    outcomes[i] = result
                    raise LoadWorkersFailed(
                        f"Ray load worker {i} ended before its measured requests ({kind}: "
                        f"{message}); no measured request was sent"
                    )
                if result:
                    todo.discard(i)
            if todo and time.monotonic() > deadline:
                raise LoadWorkersFailed(
                    f"Ray load workers {sorted(todo)} were not ready within {timeout:g} s; no "
                    "measured request was sent"
                )

    def _collect(
        self,
        runs: Sequence[Any],
        outcomes: list[Outcome | None],
        timeout: float,
        heard: ProgressSum,
    ) -> None:
        ray = self._ray
        deadline = time.monotonic() + timeout
        # Each actor's poll in flight (one at a time), and when to ask it next.
        polls: dict[Any, int] = {}
        next_poll = [time.monotonic() + PROGRESS_INTERVAL] * len(runs)
        while any(o is None for o in outcomes):
            now = time.monotonic()
            for i, outcome in enumerate(outcomes):
                if outcome is None and i not in polls.values() and now >= next_poll[i]:
                    polls[self._actors[i].poll.remote()] = i
                    next_poll[i] = now + PROGRESS_INTERVAL
            pending = [runs[i] for i, o in enumerate(outcomes) if o is None]
            done, _ = ray.wait([*pending, *polls], num_returns=1, timeout=0.5)
            for ref in done:
                if ref in polls:
                    self._take_poll(ref, polls.pop(ref), heard)
                    continue
                i = runs.index(ref)
                try:
                    outcomes[i] = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    outcomes[i] = ("died", None, self._describe(i, exc))
            if time.monotonic() > deadline:
                for i, outcome in enumerate(outcomes):
                    if outcome is None:
                        ray.kill(self._actors[i], no_restart=True)
                        outcomes[i] = (
                            "died",
                            None,
                            f"Ray load worker {i} (node {self._where[i][0]}) did not finish in "
                            f"{timeout:g} s and was killed",
                        )

    def _take_poll(self, ref: Any, index: int, heard: ProgressSum) -> None:
        # A batch of finished records and progress, moved onto this process's clock.
        try:
            batch = self._ray.get(ref)
        except self._ray.exceptions.RayError:  # the actor is gone: its run ref says so
            return
        if batch is None:
            return
        (done, total, tokens, started), records = batch
        offset = self.clocks[index].offset
        heard.add(index, (done, total, tokens, started - offset), shift_records(records, -offset))
