"""Repeated measurements of one server under one workload: what ``sglang_bench`` returns.

A :class:`BenchResult` holds the runs of one (server, workload, concurrency): each run is a
whole :class:`~pytest_sglang.measure.measurement.Measurement` with its warm-up excluded, the unit
of a sample for the verdicts. A :class:`Sweep` holds one result per concurrency level.
:class:`Bench` runs them, caches them for the session and records them for the report.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, overload

from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.report.entries import MeasurementBody, Schedule

if TYPE_CHECKING:
    from pytest_sglang.loadgen.runner import LoadGenerator
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = ["CONFIG_KEYS", "Bench", "BenchResult", "Sweep", "load_generator_for"]

#: Server-info keys that decide whether two servers' results are comparable.
CONFIG_KEYS = (
    "model_path", "served_model_name", "tp_size", "dp_size", "context_length",
    "max_running_requests", "speculative_algorithm", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend",
    "mem_fraction_static", "version",
)  # fmt: skip
DEFAULT_REPEATS = 5


@dataclass(frozen=True)
class BenchResult:
    """The repeated runs of one server under one workload at one concurrency."""

    server: str
    workload: Workload
    concurrency: int
    runs: tuple[Measurement, ...]
    #: The server's effective configuration (``CONFIG_KEYS`` of ``/server_info``).
    config: dict[str, Any] = field(default_factory=dict)
    #: How the runs were scheduled against a compared server: "blocks" or "interleaved".
    schedule: Schedule = "blocks"
    url: str = ""

    def values(self, metric: str) -> list[float]:
        """Return ``metric`` of every run (runs where it is unmeasurable are left out)."""
        metric_spec(metric)
        return [v for v in (run.get(metric) for run in self.runs) if v is not None]

    def median(self, metric: str) -> float | None:
        """Return the median over runs of ``metric``, or None when no run measured it."""
        values = self.values(metric)
        return statistics.median(values) if values else None

    @property
    def valid(self) -> bool:
        """Whether every run passed its validity checks."""
        return all(run.valid for run in self.runs)

    def problems(self) -> list[str]:
        """Return one line per failed validity check, naming the run."""
        return [
            f"run {index + 1}: {check.name}: {check.detail}"
            for index, run in enumerate(self.runs)
            for check in run.checks
            if check.passed is False
        ]

    @property
    def errors(self) -> int:
        """Failed requests over all runs."""
        return sum(run.failed for run in self.runs)

    def label(self) -> str:
        """Return e.g. ``eagle3 @ C=10``."""
        return f"{self.server} @ C={self.concurrency}"

    def as_dict(self) -> MeasurementBody:
        """Return plain JSON types, for reports."""
        return {
            "server": self.server, "url": self.url, "workload": self.workload.as_dict(),
            "concurrency": self.concurrency, "schedule": self.schedule,
            "config": dict(self.config), "runs": [run.as_dict() for run in self.runs],
        }  # fmt: skip


@dataclass(frozen=True)
class Sweep:
    """One :class:`BenchResult` per concurrency level, ascending."""

    server: str
    workload: Workload
    points: tuple[BenchResult, ...]

    @property
    def levels(self) -> tuple[int, ...]:
        """The concurrency levels, ascending."""
        return tuple(point.concurrency for point in self.points)

    def __getitem__(self, concurrency: int) -> BenchResult:
        for point in self.points:
            if point.concurrency == concurrency:
                return point
        raise KeyError(f"no level {concurrency} in the sweep of {self.server} ({self.levels})")

    def __iter__(self) -> Iterator[BenchResult]:
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)


_Key = tuple[str, str, int, int]


class Bench:
    """Measure workloads on servers: the object the ``sglang_bench`` fixture returns.

    ``bench(SERVER, workload, concurrency=1, repeats=5)`` measures ``repeats`` runs of
    ``workload`` with ``concurrency`` requests in flight on the server or profile SERVER (a
    name, launched through the pool when it is a profile, or an :class:`SGLangServer`). A
    list of concurrencies returns a :class:`Sweep`. Results are cached per (server,
    workload, concurrency, repeats) for the session, so tests share measurements.
    """

    def __init__(
        self,
        pool: ServerPool,
        *,
        record: Callable[[BenchResult, SGLangServer | None], None] = lambda result, server: None,
        progress: Callable[[str], None] = lambda message: None,
        generator_options: dict[str, Any] | None = None,
        unavailable: Callable[[str], NoReturn] | None = None,
        failure: Callable[[str], NoReturn] | None = None,
        shared: Bench | None = None,
    ) -> None:
        self.pool = pool
        self._record = record
        self._progress = progress
        self._options = generator_options or {}
        # A view (``with_recorder``) shares its origin's cache and handles: one session cache.
        self._cache: dict[_Key, BenchResult] = {} if shared is None else shared._cache
        # The server each result was measured on, for the report (without relaunching it).
        self._handles: dict[str, SGLangServer] = {} if shared is None else shared._handles
        self._on_unavailable = unavailable
        self._on_failure = failure

    def with_recorder(
        self,
        record: Callable[[BenchResult, SGLangServer | None], None],
        unavailable: Callable[[str], NoReturn] | None = None,
        failure: Callable[[str], NoReturn] | None = None,
    ) -> Bench:
        """Return a view of this bench (same cache) that records results with ``record``.

        ``unavailable`` receives the message when a server is not configured or cannot be
        launched here (the fixture skips the test), ``failure`` when its gate or launch
        failed (the fixture fails the test with the message alone); without them the errors
        propagate.
        """
        return Bench(
            self.pool,
            record=record,
            progress=self._progress,
            generator_options=self._options,
            unavailable=unavailable,
            failure=failure,
            shared=self,
        )

    def _server(self, name: str) -> SGLangServer:
        from pytest_sglang.errors import ServerUnavailable, SGLangError

        __tracebackhide__ = True
        try:
            return self.pool.get(name)
        except ServerUnavailable as exc:
            if self._on_unavailable is None:
                raise
            message, handler = str(exc), self._on_unavailable
        except SGLangError as exc:
            if self._on_failure is None:
                raise
            message, handler = str(exc), self._on_failure
        handler(message)

    @overload
    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int = 1,
        repeats: int = DEFAULT_REPEATS,
    ) -> BenchResult: ...

    @overload
    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: Sequence[int],
        repeats: int = DEFAULT_REPEATS,
    ) -> Sweep: ...

    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int | Sequence[int] = 1,
        repeats: int = DEFAULT_REPEATS,
    ) -> BenchResult | Sweep:
        """Measure (or fetch from the cache); see the class docstring."""
        levels = [concurrency] if isinstance(concurrency, int) else list(concurrency)
        if len(set(levels)) != len(levels):
            raise ValueError(f"concurrency levels must be distinct, got {concurrency!r}")
        if not levels or any(not isinstance(c, int) or c < 1 for c in levels):
            raise ValueError(
                f"concurrency must be a positive int or a list of them, got {concurrency!r}"
            )
        if repeats < 1:
            raise ValueError(f"repeats must be at least 1, got {repeats}")
        points = tuple(self._measure(server, workload, level, repeats) for level in sorted(levels))
        if isinstance(concurrency, int):
            return points[0]
        name = server if isinstance(server, str) else server.name
        return Sweep(name, workload, points)

    def pair(
        self,
        a: str,
        b: str,
        workload: Workload,
        concurrency: int = 1,
        repeats: int = DEFAULT_REPEATS,
    ) -> tuple[BenchResult, BenchResult]:
        """Measure two servers under the same workload and concurrency.

        Runs are interleaved A B A B when both can be served at once (two attached URLs), so
        that drift cancels; in blocks otherwise (launched profiles share the GPUs). The
        schedule is recorded in both results.
        """
        attached = {s.name for s in self.pool.settings.servers}
        keys = [self._key(name, workload, concurrency, repeats) for name in (a, b)]
        fresh = not any(key in self._cache for key in keys)
        if a in attached and b in attached and fresh:
            self._check_fills(workload, concurrency)
            servers = (self._server(a), self._server(b))
            runs: tuple[list[Measurement], list[Measurement]] = ([], [])
            for repeat in range(repeats):
                for side, server in enumerate(servers):
                    runs[side].append(self._run(server, workload, concurrency, repeat, repeats))
            for side, server in enumerate(servers):
                result = self._result(server, workload, concurrency, runs[side], "interleaved")
                self._cache[keys[side]] = result
        first = self(a, workload, concurrency, repeats)
        second = self(b, workload, concurrency, repeats)
        assert isinstance(first, BenchResult) and isinstance(second, BenchResult)
        return first, second

    # -- internals ------------------------------------------------------------------------

    @staticmethod
    def _check_fills(workload: Workload, concurrency: int) -> None:
        sent = workload.for_concurrency(concurrency).requests
        if sent < concurrency:
            raise ValueError(
                f"a run at concurrency {concurrency} with {sent} requests can never hold "
                f"{concurrency} requests in flight; give the workload requests >= "
                f"{concurrency}, or requests_per_slot (e.g. requests_per_slot=2) to scale "
                "the requests with the level"
            )

    @staticmethod
    def _key(server: str, workload: Workload, concurrency: int, repeats: int) -> _Key:
        return (server, workload.key(), concurrency, repeats)

    def _measure(
        self, server: str | SGLangServer, workload: Workload, concurrency: int, repeats: int
    ) -> BenchResult:
        name = server if isinstance(server, str) else server.name
        key = self._key(name, workload, concurrency, repeats)
        if key not in self._cache:
            self._check_fills(workload, concurrency)
            handle = self._server(server) if isinstance(server, str) else server
            runs = [self._run(handle, workload, concurrency, r, repeats) for r in range(repeats)]
            self._cache[key] = self._result(handle, workload, concurrency, runs, "blocks")
        result = self._cache[key]
        self._record(result, self._handles.get(name))
        return result

    def _result(
        self,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        runs: list[Measurement],
        schedule: Schedule,
    ) -> BenchResult:
        self._handles[server.name] = server
        config = {k: server.server_info[k] for k in CONFIG_KEYS if k in server.server_info}
        return BenchResult(server.name, workload, concurrency, tuple(runs), config, schedule,
                           server.url)  # fmt: skip

    def _run(
        self, server: SGLangServer, workload: Workload, concurrency: int, repeat: int, repeats: int
    ) -> Measurement:
        from pytest_sglang.measure.measurement import measure

        label = f"{server.name} C={concurrency} run {repeat + 1}/{repeats}"
        last = [0.0]

        def progress(done: int, total: int, output_tokens: int, elapsed: float) -> None:
            # The generator calls at most once a second; a line every 10 s is enough here.
            now = time.monotonic()
            if now - last[0] >= 10.0:
                last[0] = now
                rate = output_tokens / elapsed if elapsed > 0 else 0.0
                self._progress(f"sglang: measuring {label}: {done}/{total} requests, "
                               f"{rate:.0f} output tok/s")  # fmt: skip

        last[0] = time.monotonic()
        generator = load_generator_for(server, progress=progress, **self._options)
        run = generator.run_closed_loop(
            workload.for_concurrency(concurrency), concurrency, repeat=repeat
        )
        return measure(run)


def load_generator_for(server: SGLangServer, **options: Any) -> LoadGenerator:
    """Return a load generator for a server that passed the readiness gate.

    The load generator knows URLs and headers, not servers: this hands it the server's base
    URL, its headers (the API key) and its served model id. ``options`` are the other
    keyword arguments of :class:`~pytest_sglang.loadgen.runner.LoadGenerator`.
    """
    from pytest_sglang.loadgen.runner import LoadGenerator

    return LoadGenerator(server.url, headers=server.headers, model=server.model.id, **options)
