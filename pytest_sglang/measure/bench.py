"""The object the ``sglang_bench`` fixture returns: measure, cache for the session, record.

A measurement beyond its budget (``measure/budget.py``) fails its test, recorded first; one cut
short (a test timeout, Ctrl-C) is reported with the runs it finished. The measurements tests
declare at collection (``sglang_measure``) are taken while their server is up, so each profile
launches once per session (:meth:`Bench.take_declared`).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NoReturn, overload

import pytest

from pytest_sglang.errors import MeasurementFailed, ServerUnavailable, SGLangError
from pytest_sglang.loadgen.schedule import Arrival, ClosedLoop, Load, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.budget import (
    Budget,
    broken_message,
    check_fills,
    levels_of,
    open_loop_of,
    repeats_of,
)
from pytest_sglang.measure.measurement import Measurement, measure
from pytest_sglang.measure.results import CONFIG_KEYS, BenchResult, Sweep, packed
from pytest_sglang.measure.runs import Interrupted, Runner, cut_by
from pytest_sglang.report.progress import RunLine

if TYPE_CHECKING:
    from pytest_sglang.loadgen.records import LoadRun
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = ["PLANS_KEY", "Bench", "Declared", "cache_key", "declared_measurements"]

_Record = Callable[[BenchResult, "SGLangServer"], None]
#: A measurement and the server it was taken on (for the report).
_Entry = tuple[BenchResult, "SGLangServer"]

#: Runs per measurement when a test does not say (``sglang_bench`` and ``sglang_measure``).
DEFAULT_REPEATS = 5

_EXAMPLE = (
    "write e.g. @pytest.mark.sglang_measure('baseline', 'eagle3', workload=CHAT, "
    "concurrency=[1, 64], repeats=5)"
)


@dataclass(frozen=True)
class Declared:
    """One measurement a test declared: a server, a workload, a closed loop and its repeats."""

    server: str
    workload: Workload
    load: ClosedLoop
    repeats: int

    def label(self) -> str:
        """Return e.g. ``baseline @ C=64 (x5)``."""
        return f"{self.server} @ {self.load.describe()} (x{self.repeats})"


#: The session cache's key of a measurement: server, workload, load, repeats.
CacheKey = tuple[str, str, str, int]
#: Every measurement the selected tests declared, by cache key, in declaration order.
MeasurementPlans = dict[CacheKey, Declared]

#: The measurements the selected tests declare (``sglang_measure``), set at collection.
PLANS_KEY = pytest.StashKey[MeasurementPlans]()


def cache_key(server: str, workload: Workload, load: Load, repeats: int) -> CacheKey:
    """Return the session cache's key of a measurement."""
    return (server, workload.key(), load.key(), repeats)


def _declared(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Declared]:
    """Return the measurements one ``sglang_measure`` marker declares (ValueError: why not)."""
    unknown = sorted(set(kwargs) - {"workload", "concurrency", "repeats"})
    if unknown:
        raise ValueError(f"unknown keyword(s) {', '.join(unknown)}; {_EXAMPLE}")
    if not args or not all(isinstance(s, str) and s for s in args):
        raise ValueError(f"name one or more servers first, got {args!r}; {_EXAMPLE}")
    workload = kwargs.get("workload")
    if not isinstance(workload, Workload):
        raise ValueError(
            f"workload= must be a pytest_sglang.Workload, got {type(workload).__name__}; {_EXAMPLE}"
        )
    levels = sorted(levels_of(kwargs.get("concurrency", 1)))
    repeats = repeats_of(kwargs.get("repeats", DEFAULT_REPEATS))
    for level in levels:
        check_fills(workload, level)
    return [
        Declared(server, workload, ClosedLoop(level), repeats)
        for server in args
        for level in levels
    ]


def declared_measurements(items: Iterable[pytest.Item]) -> MeasurementPlans:
    """Return what the ``sglang_measure`` markers of ``items`` declare, in their order.

    :raises pytest.UsageError: a malformed marker, naming the test and the fix.
    """
    plans: MeasurementPlans = {}
    for item in items:
        for marker in item.iter_markers("sglang_measure"):
            try:
                declared = _declared(marker.args, marker.kwargs)
            except (TypeError, ValueError) as exc:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_measure: {exc}"
                ) from None
            for one in declared:
                plans.setdefault(cache_key(one.server, one.workload, one.load, one.repeats), one)
    return plans


class Bench(Runner):
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
        plans: MeasurementPlans | None = None,
        run_line: RunLine | None = None,
    ) -> None:
        super().__init__(pool, run_line=run_line)
        self._record: _Record = self._keep_cut  # a test's view records with its own
        self._plans = plans or {}
        # Set by ``with_recorder`` for a test; without them the errors propagate.
        self._on_unavailable: Callable[[str], NoReturn] | None = None
        self._on_failure: Callable[[str], NoReturn] | None = None
        # Shared by every view (``with_recorder``): the session cache, each result with its
        # server; and, by id, those no test has recorded (taken for a later test, or cut).
        self._cache: dict[CacheKey, _Entry] = {}
        self._unreported: dict[int, _Entry] = {}

    def take_unreported(self) -> list[_Entry]:
        """Return, once, the measurements no test has recorded, so an interrupt loses none."""
        taken = list(self._unreported.values())
        self._unreported.clear()
        return taken

    def with_recorder(
        self,
        record: _Record,
        unavailable: Callable[[str], NoReturn] | None = None,
        failure: Callable[[str], NoReturn] | None = None,
        server_failed: Callable[[str, SGLangError], None] = lambda name, error: None,
        during: str = "",
    ) -> Bench:
        """Return a view of this bench (same cache) that records results with ``record``.

        ``unavailable`` (skip) and ``failure`` (fail) receive the message of a server that
        cannot be had; without them the errors propagate.
        """
        view = copy.copy(self)  # the containers are shared: one session cache
        view._record, view._on_unavailable, view._on_failure = record, unavailable, failure
        view._server_failed, view._during = server_failed, during
        return view

    def _server(self, server: str | SGLangServer, *, why: str = "") -> SGLangServer:
        __tracebackhide__ = True
        if not isinstance(server, str):
            return server
        try:
            return self.pool.get(server, during=self._during, why=why)
        except ServerUnavailable as exc:
            self._fail(exc, skip=True)
        except SGLangError as exc:
            self._server_failed(server, exc)
            self._fail(exc)

    def _fail(self, error: SGLangError, *, skip: bool = False) -> NoReturn:
        """Fail (``skip``: skip) the test with ``error`` through the fixture, or raise it."""
        __tracebackhide__ = True
        handler = self._on_unavailable if skip else self._on_failure
        if handler is None:
            raise error
        handler(str(error))  # the fixture's: it raises from None, without our error's chain

    @overload
    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int = 1,
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
        rate: float | None = None,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
    ) -> BenchResult: ...

    @overload
    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: Sequence[int],
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
    ) -> Sweep: ...

    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int | Sequence[int] = 1,
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
        rate: float | None = None,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
    ) -> BenchResult | Sweep:
        """Measure (or fetch from the cache); see the class docstring.

        A run with more failed requests than ``allow_errors`` (a fraction), or a failed
        validity check not in ``allow_checks``, fails the test (``docs/metrics.md``, "Validity
        checks"). ``rate`` measures an open loop instead (``arrival``, ``max_concurrency``:
        ``docs/workloads.md``, "Open-loop load").
        """
        __tracebackhide__ = True
        load = open_loop_of(
            None if concurrency == 1 else concurrency, rate, arrival, max_concurrency
        )
        loads = [load] if load is not None else map(ClosedLoop, sorted(levels_of(concurrency)))
        repeats = repeats_of(repeats)
        budget = Budget.of(allow_errors, allow_checks)
        points = tuple(self._measure(server, workload, one, repeats, budget) for one in loads)
        if isinstance(concurrency, int):
            return points[0]
        return Sweep(points[0].server, workload, points)

    def pair(
        self,
        a: str,
        b: str,
        workload: Workload,
        concurrency: int = 1,
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
    ) -> tuple[BenchResult, BenchResult]:
        """Measure two servers under the same workload and concurrency.

        Runs are interleaved A B A B when both are attached, so that drift cancels; in blocks
        otherwise (launched profiles share the GPUs). Both servers are held for the comparison:
        no other pytest-xdist worker measures either meanwhile.
        """
        __tracebackhide__ = True
        (level,) = levels_of(concurrency)
        load = ClosedLoop(level)
        repeats = repeats_of(repeats)
        budget = Budget.of(allow_errors, allow_checks)
        with self.pool.measuring(a, b, during=self._during):
            cached = any(cache_key(n, workload, load, repeats) in self._cache for n in (a, b))
            if {a, b} <= {s.name for s in self.pool.settings.servers} and not cached:
                check_fills(workload, level)
                self._take((self._server(a), self._server(b)), workload, load, repeats)
            first = self._measure(a, workload, load, repeats, budget)
            return first, self._measure(b, workload, load, repeats, budget)

    def run_once(
        self,
        server: str | SGLangServer,
        workload: Workload,
        *,
        concurrency: int | None = None,
        rate: float | None = None,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> Measurement:
        """Measure one run, neither cached nor reported: what a capacity search spends.

        A closed loop at ``concurrency``, or an open loop at ``rate``; ``repeat`` numbers the
        run (each repeat sends other prompts). E.g.
        ``find_capacity(lambda r, i: sglang_bench.run_once("eagle3", w, rate=r, repeat=i),
        [5, 10, 20, 40], "ttft.p99 <= 1s", unit="rate")``.
        """
        __tracebackhide__ = True
        load: Load | None = open_loop_of(concurrency, rate, arrival, max_concurrency)
        if load is None:
            if concurrency is None:
                raise ValueError(
                    "run_once measures a closed loop (concurrency=C) or an open loop (rate=R): "
                    "give one"
                )
            (level,) = levels_of(concurrency)
            check_fills(workload, level)
            load = ClosedLoop(level)
        handle = self._server(server)
        try:
            with self.pool.measuring(handle, during=self._during):
                return self._run(handle, workload, load, repeat, repeat + 1, {})  # a cut: dropped
        except Interrupted as stop:
            self._fail(stop.error)

    def take_declared(self, server: SGLangServer) -> None:
        """Take every measurement the selected tests declared for ``server``, now it is up.

        The pool calls this after a launch. One that fails is not cached: its test measures
        again and fails with its own message.
        """
        pending = sorted(
            (d for k, d in self._plans.items() if d.server == server.name and k not in self._cache),
            key=lambda declared: declared.load.concurrency,
        )
        if not pending:
            return
        self.pool.say(
            f"sglang: {server.name!r} is up: taking the {len(pending)} measurement(s) declared "
            f"for it ({', '.join(declared.label() for declared in pending)})"
        )
        for number, declared in enumerate(pending, 1):
            started = time.monotonic()
            try:
                self._take((server,), declared.workload, declared.load, declared.repeats)
            except Exception as exc:  # the declaring test measures again, and says why
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self.pool.say(
                    f"sglang: the declared measurement {declared.label()} failed: {first}"
                )
                if self.pool.check(server.name) is not None:
                    return  # the server died: the tests that need it fail naming the death
                continue
            self.pool.say(
                f"sglang: declared measurement {number}/{len(pending)} of {server.name!r} "
                f"done: {declared.label()} in {time.monotonic() - started:.0f}s"
            )

    # -- internals ------------------------------------------------------------------------

    def _keep_cut(self, result: BenchResult, server: SGLangServer) -> None:
        """Keep a cut measurement no test records (a declared one), reported at the end."""
        if result.cut is not None:
            self._unreported[id(result)] = (result, server)

    def _measure(
        self,
        server: str | SGLangServer,
        workload: Workload,
        load: Load,
        repeats: int,
        budget: Budget,
    ) -> BenchResult:
        """Measure (or fetch) ``repeats`` runs, then record the result and judge it."""
        __tracebackhide__ = True
        name = server if isinstance(server, str) else server.name
        key = cache_key(name, workload, load, repeats)
        if key not in self._cache:
            if isinstance(load, ClosedLoop):
                check_fills(workload, load.concurrency)
            why = ""
            if load.mode == "closed" and self._plans and key not in self._plans:
                why = (
                    f"a measurement no selected test declared ({name} @ {load.describe()}, "
                    f"x{repeats}): add it to the test's @pytest.mark.sglang_measure so that "
                    "it is taken while the server is up"
                )
            handle = self._server(server, why=why)
            if key not in self._cache:  # the server's launch may have taken it (take_declared)
                self._take((handle,), workload, load, repeats)
        result, handle = self._cache[key]
        self._record(result, handle)
        self._unreported.pop(id(result), None)
        broken = broken_message(result, budget)
        if broken is not None:
            self._fail(MeasurementFailed(broken))
        return result

    def _take(
        self, servers: tuple[SGLangServer, ...], workload: Workload, load: Load, repeats: int
    ) -> None:
        """Take ``repeats`` runs on each of ``servers`` (A B A B, so that drift cancels).

        Caches one result per server, not yet recorded. An ended measurement is recorded and
        fails the test; a cut one is recorded, labelled.
        """
        __tracebackhide__ = True
        runs: tuple[list[Measurement], ...] = tuple([] for _ in servers)
        cuts: dict[str, LoadRun | None] = {}  # a cut run's finished part, by server

        def result(server: SGLangServer, taken: list[Measurement]) -> BenchResult:
            return BenchResult(
                server.name,
                workload,
                load.slots or 0,
                tuple(taken),  # packed by the runner
                {k: server.server_info[k] for k in CONFIG_KEYS if k in server.server_info},
                "interleaved" if len(servers) > 1 else "blocks",
                server.url,
                open_loop=load if isinstance(load, OpenLoop) else None,
                not_applicable=server.not_applicable,
            )

        try:
            with self.pool.measuring(*servers, during=self._during):
                for repeat in range(repeats):
                    for server, taken in zip(servers, runs, strict=True):
                        taken.append(self._run(server, workload, load, repeat, repeats, cuts=cuts))
        except Interrupted as stop:
            ended = [*runs[servers.index(stop.server)], stop.measurement]
            self._record(result(stop.server, ended), stop.server)
            self._fail(stop.error)
        except BaseException as error:  # a test timeout or Ctrl-C
            for server, taken in zip(servers, runs, strict=True):
                finished = list(taken)
                interrupted = cuts.get(server.name)
                if interrupted is not None and interrupted.measured:
                    with contextlib.suppress(ValueError):  # too little: the finished runs stand
                        finished.append(packed(measure(interrupted)))
                if not finished:
                    continue  # nothing finished: the test's own failure says what cut it
                cut = f"{cut_by(error)}, in run {len(taken) + 1} of {repeats}"
                whole = result(server, finished)
                self._record(replace(whole, cut=cut, finished_runs=len(taken)), server)
                self.pool.say(f"sglang: the measurement {whole.label()} was cut: {cut}")
            raise
        for server, taken in zip(servers, runs, strict=True):
            entry = (result(server, taken), server)
            self._cache[cache_key(server.name, workload, load, repeats)] = entry
            self._unreported[id(entry[0])] = entry
