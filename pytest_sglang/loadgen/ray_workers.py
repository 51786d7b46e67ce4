"""A run spread over load-generator workers on several hosts: Ray actors (``pytest-sglang[ray]``).

The workers of :mod:`~pytest_sglang.loadgen.workers` as Ray actors, with the same guarantees
(exact total concurrency, a common start, loss is failure) plus one time base: each actor's
clock offset is measured NTP-style before the measured start and its records are moved onto the
coordinator's clock. Ray is imported only when a run is made. See ``docs/scaling.md``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Self, Unpack

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.records import LoadRun
from pytest_sglang.loadgen.workers import (
    Coordination,
    LoadWorkersFailed,
    Message,
    RunPlan,
    coordinate,
    serve,
)
from pytest_sglang.loadgen.workload import check_count

__all__ = ["CLOCK_ROUNDS", "ClockOffset", "RayLoadWorkers", "RayUnavailable"]

#: Seconds to wait for the cluster's address to take a TCP connection.
CONNECT_TIMEOUT = 5.0

#: Clock readings per actor before each run; the one with the shortest round trip is kept.
CLOCK_ROUNDS = 8


class RayUnavailable(SGLangError):
    """Ray is not installed, or the Ray cluster named could not be reached."""


@dataclass(frozen=True)
class ClockOffset:
    """How worker ``worker``'s clock relates to the coordinator's, measured before a run.

    ``offset`` is what to add to a coordinator ``perf_counter`` reading to get the actor's,
    wrong by at most half the ``round_trip`` of the reading kept. ``node`` (its IP address),
    ``node_id`` and ``pid`` say where the actor runs.
    """

    worker: int
    node: str
    node_id: str
    pid: int
    offset: float
    round_trip: float

    @property
    def uncertainty(self) -> float:
        """The largest error of :attr:`offset`, in seconds (half the round trip)."""
        return self.round_trip / 2


def estimate_offset(samples: Sequence[tuple[float, float, float]]) -> tuple[float, float]:
    """Return ``(offset, round_trip)`` from ``(t0, remote, t1)`` clock readings.

    The remote clock was read somewhere between the coordinator's ``t0`` and ``t1``, so
    ``remote - (t0 + t1) / 2`` is wrong by at most ``(t1 - t0) / 2``: the shortest round trip
    bounds the error best.
    """
    if not samples:
        raise ValueError("no clock readings")
    t0, remote, t1 = min(samples, key=lambda s: s[2] - s[0])
    return remote - (t0 + t1) / 2, t1 - t0


def connect(address: str | None, *, source: str = "the address argument") -> ModuleType:
    """Connect this process to the Ray cluster at ``address`` (once) and return ``ray``.

    An already connected process (``ray.init`` called by the user) is used as it is; with no
    address this refuses (a private single-node Ray would put every worker on this host).
    ``source`` says where the address came from, e.g. ``-o sglang_ray_address on the command line``.

    :raises RayUnavailable: Ray is missing (how to install it), or the cluster is unreachable.
    """
    try:
        import ray
    except ImportError as exc:
        raise RayUnavailable(
            f"Ray is not installed ({exc}): the load runs on Ray actors only with the "
            "optional extra: pip install 'pytest-sglang[ray]' (on every node of the cluster)"
        ) from exc
    if ray.is_initialized():
        return ray
    if not address:
        raise RayUnavailable(
            "no Ray cluster to run the load workers on: give its address (-o sglang_ray_address="
            "HOST:PORT, ini sglang_ray_address, env PYTEST_SGLANG_RAY_ADDRESS; 'auto' finds the "
            "cluster this host belongs to), or call ray.init() first"
        )
    # Ray retries an unreachable GCS for minutes: a closed port is told at once instead.
    problem = unreachable(address)
    if problem is None:
        try:
            ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
            return ray
        except Exception as exc:  # ConnectionError, ValueError, RuntimeError: all unreachable
            problem = _reason(exc)
    raise RayUnavailable(
        f"cannot connect to the Ray cluster at {address!r} (from {source}): {problem}; "
        "check that the head node runs (`ray status` there), that the address is its GCS "
        "address HOST:PORT (what `ray start --head` printed, port 6379 by default) and "
        "that this host can reach it"
    )


def unreachable(address: str, timeout: float = CONNECT_TIMEOUT) -> str | None:
    """Why ``address`` (``[ray://]HOST:PORT``; ``"auto"`` is left to Ray) takes no connection."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as exc:
        return f"nothing answers on {host}:{port} ({exc.strerror or type(exc).__name__})"


class _LoadActor:  # pragma: no cover - runs inside a Ray actor; covered end to end
    """One worker: runs its shard of a plan (:func:`~.workers.serve`), its messages queued."""

    def __init__(self) -> None:
        self._messages: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self._start: queue.SimpleQueue[float] = queue.SimpleQueue()

    def where(self) -> tuple[str, str, int]:
        """Return this actor's node address, Ray node id and process id."""
        import ray

        ip = str(ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
        return ip, str(ray.get_runtime_context().get_node_id()), os.getpid()

    def clock(self) -> float:
        """Return this actor's ``perf_counter``."""
        return time.perf_counter()

    def take(self, timeout: float) -> list[Message]:
        """Return the messages sent since the last take, waiting up to ``timeout`` for one."""
        messages = []
        with contextlib.suppress(queue.Empty):
            messages.append(self._messages.get(timeout=timeout))
            while True:
                messages.append(self._messages.get_nowait())
        return messages

    def go(self, start_at: float) -> None:
        """Start the measured requests at ``start_at`` (this actor's clock)."""
        self._start.put(start_at)

    def run(self, index: int, shares: tuple[int, ...], plan: RunPlan) -> None:
        """Run shard ``index`` of ``plan``, its messages queued for :meth:`take`.

        It waits for its start as long as it lives: a run that fails kills it, and Ray kills
        it with the process that made it.
        """
        serve(index, shares, plan, self._messages.put, self._start.get)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}".rstrip(": ")


class RayLoadWorkers:
    """``workers`` load-generator actors on a Ray cluster, reused from run to run.

    ``with RayLoadWorkers(2, address="head:6379") as w: run = w.run(RunPlan(...))``.
    ``address`` is the head's ``HOST:PORT`` or ``"auto"`` (``None``: the connection this
    process has), ``source`` where it came from. Each actor reserves ``num_cpus`` (one event
    loop, one core) and the custom ``resources`` given, to pin the workers to the nodes
    that offer them (``ray start --resources='{"loadgen": 4}'`` on client hosts).
    """

    name = "Ray load worker"

    def __init__(
        self,
        workers: int,
        *,
        address: str | None = None,
        source: str = "the address argument",
        num_cpus: float = 1.0,
        resources: Mapping[str, float] | None = None,
    ) -> None:
        check_count("workers", workers)
        self.workers = workers
        self._ray = connect(address, source=source)
        self._asks = {"CPU": num_cpus, **(resources or {})}
        self._actor_class = self._ray.remote(_LoadActor).options(
            num_cpus=num_cpus,
            max_concurrency=4,  # run, take, clock and go at once
            max_restarts=0,
            resources=dict(resources or {}),
            scheduling_strategy="SPREAD",  # on as many nodes as possible
        )
        self._actors: list[Any] = []
        self._where: list[tuple[str, str, int]] = []
        #: The clock offsets read at the last run's start, one per actor that took part.
        self.clocks: tuple[ClockOffset, ...] = ()
        # The run in progress: the refs awaited (worker, "run" or "take").
        self._refs: dict[Any, tuple[int, str]] = {}
        self._count = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the actors (the Ray connection stays: it is the process's)."""
        for actor in self._actors:
            with contextlib.suppress(Exception):  # already gone with its node
                self._ray.kill(actor, no_restart=True)
        self._actors, self._where = [], []

    def _ensure(self, count: int, timeout: float) -> None:
        """Have ``count`` live actors, replacing any lost in an earlier run."""
        ray, new = self._ray, self._actor_class.remote
        self._actors += [new() for _ in range(count - len(self._actors))]
        deadline = time.monotonic() + timeout  # placed at once: they were all made above
        self._where = []
        for i, actor in enumerate(self._actors):
            try:
                where = ray.get(actor.where.remote(), timeout=max(1.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                self.close()
                raise LoadWorkersFailed(
                    f"Ray load worker {i} was not placed within {timeout:g} s: the cluster may "
                    f"lack free resources (each worker asks for "
                    f"{', '.join(f'{k} {v:g}' for k, v in self._asks.items())}, {self.workers} "
                    "workers; see `ray status`); no request was sent"
                ) from None
            except ray.exceptions.RayError:  # lost since the last run: a fresh one
                self._actors[i] = new()
                where = ray.get(self._actors[i].where.remote(), timeout=timeout)
            self._where.append(tuple(where))

    def _clock(self, index: int) -> ClockOffset:
        actor = self._actors[index]
        samples = []
        for _ in range(CLOCK_ROUNDS):
            t0 = time.perf_counter()
            remote = self._ray.get(actor.clock.remote(), timeout=30)
            samples.append((t0, float(remote), time.perf_counter()))
        offset, round_trip = estimate_offset(samples)
        return ClockOffset(index, *self._where[index], offset, round_trip)

    def run(self, plan: RunPlan, **coordination: Unpack[Coordination]) -> LoadRun:
        """Run ``plan`` on the actors and return one merged :class:`LoadRun`.

        ``coordination`` is :func:`~pytest_sglang.loadgen.workers.coordinate`'s
        (``ready_timeout`` includes the actors' placement). Records are on this process's
        ``perf_counter`` clock. A failed run kills the actors: nothing may keep loading the
        server after it (a later run makes fresh ones).
        """
        shares = plan.shares(self.workers)
        self.clocks = ()
        self._ensure(len(shares), coordination.get("ready_timeout", 600.0))
        self._count, self._refs = len(shares), {}
        for i, actor in enumerate(self._actors[: len(shares)]):
            self._refs[actor.run.remote(i, shares, plan)] = (i, "run")
        try:
            return coordinate(plan, shares, self, **coordination)
        except BaseException:
            self.close()
            raise

    def start(self, margin: float) -> list[float]:
        """Workers.start: read every actor's clock, then tell each the start on its own."""
        self.clocks = tuple(self._clock(i) for i in range(self._count))
        at = time.perf_counter() + margin
        self._ray.get(
            [self._actors[c.worker].go.remote(at + c.offset) for c in self.clocks], timeout=30
        )
        return [c.offset for c in self.clocks]

    def receive(self, pending: set[int]) -> list[tuple[int, Message]]:
        """Workers.receive: each pending actor has a take in flight."""
        ray = self._ray
        taking = {i for i, kind in self._refs.values() if kind == "take"}
        for i in pending - taking:
            self._refs[self._actors[i].take.remote(0.5)] = (i, "take")
        watch = [ref for ref, (i, _) in self._refs.items() if i in pending]
        done, _ = ray.wait(watch, num_returns=1, timeout=1.0)
        if not done:
            return []
        i, _ = self._refs.pop(done[0])
        try:
            messages: list[Message] = ray.get(done[0]) or []  # a run returns none: it sends all
        except ray.exceptions.RayError as exc:
            node, _, pid = self._where[i]
            lost = (
                f"Ray load worker {i} (node {node}, pid {pid}) was lost: {_reason(exc)} "
                "(its process was killed or its node left the cluster)"
            )
            return [(i, ("died", None, lost))]
        return [(i, message) for message in messages]

    def kill(self, index: int) -> str:
        """Workers.kill."""
        self._ray.kill(self._actors[index], no_restart=True)
        return f"Ray load worker {index} (node {self._where[index][0]})"
