"""The object the ``sglang_bench`` fixture returns: measure, cache for the session, record.

A measurement beyond its budget (``measure/budget.py``) fails its test, recorded first; one cut
short (a test timeout, Ctrl-C) is reported with the runs it finished.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NoReturn, overload

from pytest_sglang.loadgen.schedule import Arrival, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.budget import (
    Budget,
    broken_message,
    check_fills,
    levels_of,
    open_loop_of,
    repeats_of,
)
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.plans import DEFAULT_REPEATS, MeasurementPlans
from pytest_sglang.measure.results import BenchResult, Sweep, packed
from pytest_sglang.measure.runs import Interrupted, Runner, cut_by
from pytest_sglang.report.entries import Schedule
from pytest_sglang.report.progress import RunLine

if TYPE_CHECKING:
    from pytest_sglang.errors import SGLangError
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = ["Bench"]

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
        plans: MeasurementPlans | None = None,
        run_line: RunLine | None = None,
    ) -> None:
        self.pool = pool
        self._record = record
        self._progress = progress
        self._runner = Runner(
            pool, generator_options=generator_options, progress=progress, run_line=run_line
        )
        self._plans = plans or MeasurementPlans()
        # Set by ``with_recorder`` for a test; without them the errors propagate.
        self._on_unavailable: Callable[[str], NoReturn] | None = None
        self._on_failure: Callable[[str], NoReturn] | None = None
        self._server_failed: Callable[[str, SGLangError], None] = lambda name, error: None
        self._during = ""  # the test id measuring, for a server's death message
        # Shared by every view (``with_recorder``): the session cache, the server of each
        # result, the ids of the results recorded, and the cut ones no test recorded.
        self._cache: dict[_Key, BenchResult] = {}
        self._handles: dict[str, SGLangServer] = {}
        self._recorded: set[int] = set()
        self._unrecorded_cuts: list[tuple[BenchResult, SGLangServer]] = []

    def close(self) -> None:
        """Release what the bench keeps between runs (the Ray load-worker actors)."""
        self._runner.close()

    def take_unreported(self) -> list[tuple[BenchResult, SGLangServer | None]]:
        """Return, once, the measurements taken that no test has recorded, with their server.

        An interrupted session reports them, so that no finished run is lost.
        """
        taken = [
            (result, self._handles.get(result.server))
            for result in self._cache.values()
            if id(result) not in self._recorded
        ]
        taken += self._unrecorded_cuts
        self._unrecorded_cuts.clear()
        self._recorded.update(id(result) for result, _ in taken)
        return taken

    def with_recorder(
        self,
        record: Callable[[BenchResult, SGLangServer | None], None],
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
        view._runner = self._runner.view(during=during, server_failed=server_failed)
        return view

    def _server(self, name: str, *, why: str = "") -> SGLangServer:
        from pytest_sglang.errors import ServerUnavailable, SGLangError

        __tracebackhide__ = True
        try:
            return self.pool.get(name, during=self._during, why=why)
        except ServerUnavailable as exc:
            if self._on_unavailable is None:
                raise
            message, handler = str(exc), self._on_unavailable
        except SGLangError as exc:
            self._server_failed(name, exc)
            if self._on_failure is None:
                raise
            message, handler = str(exc), self._on_failure
        handler(message)

    def _fail(self, error: SGLangError) -> NoReturn:
        """Fail the test with ``error`` (through the fixture's handler, or raise it)."""
        __tracebackhide__ = True
        if self._on_failure is None:
            raise error
        try:
            self._on_failure(str(error))
        except BaseException as failed:
            failed.__suppress_context__ = True
            raise

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
        given = None if concurrency == 1 else concurrency
        load = open_loop_of(given, rate, arrival, max_concurrency)
        levels = [load.max_concurrency or 0] if load is not None else levels_of(concurrency)
        repeats = repeats_of(repeats)
        budget = Budget.of(allow_errors, allow_checks)
        points = tuple(
            self._measure(server, workload, level, repeats, budget, load=load)
            for level in sorted(levels)
        )
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
        repeats = repeats_of(repeats)
        budget = Budget.of(allow_errors, allow_checks)
        with self.pool.measuring(a, b, during=self._during):
            attached = {s.name for s in self.pool.settings.servers}
            keys = [self._key(name, workload, level, repeats) for name in (a, b)]
            if a in attached and b in attached and not any(key in self._cache for key in keys):
                check_fills(workload, level)
                servers = (self._server(a), self._server(b))
                runs: tuple[list[Measurement], list[Measurement]] = ([], [])
                try:
                    self._runner.interleaved(servers, workload, level, repeats, runs)
                except Interrupted as stop:
                    side = servers.index(stop.server)
                    runs[side].append(stop.measurement)
                    partial = self._result(stop.server, workload, level, runs[side], "interleaved")
                    self._record(partial, stop.server)
                    self._fail(stop.error)
                except BaseException as error:  # a test timeout or Ctrl-C
                    for server, taken in zip(servers, runs, strict=True):
                        cut = (server, workload, level, taken, repeats, error)
                        self._record_cut(*cut, schedule="interleaved")
                    raise
                for key, server, taken in zip(keys, servers, runs, strict=True):
                    self._cache[key] = self._result(server, workload, level, taken, "interleaved")
            first = self._measure(a, workload, level, repeats, budget)
            return first, self._measure(b, workload, level, repeats, budget)

    # -- internals ------------------------------------------------------------------------

    @staticmethod
    def _key(
        server: str,
        workload: Workload,
        concurrency: int,
        repeats: int,
        load: OpenLoop | None = None,
    ) -> _Key:
        what = workload.key() if load is None else f"{workload.key()}|{load.key()}"
        return (server, what, concurrency, repeats)

    def _measure(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int,
        repeats: int,
        budget: Budget,
        *,
        load: OpenLoop | None = None,
    ) -> BenchResult:
        """Measure (or fetch) ``repeats`` runs: a closed loop, or the open loop ``load``."""
        __tracebackhide__ = True
        name = server if isinstance(server, str) else server.name
        key = self._key(name, workload, concurrency, repeats, load)
        if key not in self._cache:
            if load is None:
                check_fills(workload, concurrency)
            if isinstance(server, str):
                why = self._undeclared(key, concurrency) if load is None else ""
                handle = self._server(server, why=why)
            else:
                handle = server
            if key not in self._cache:
                self._fill(handle, workload, concurrency, repeats, key, load=load)
        return self._judged(self._cache[key], budget)

    def _judged(self, result: BenchResult, budget: Budget) -> BenchResult:
        """Record ``result`` for the test, then fail it if it is broken or invalid."""
        __tracebackhide__ = True
        self._record(result, self._handles.get(result.server))
        self._recorded.add(id(result))
        broken = broken_message(result, budget)
        if broken is not None:
            from pytest_sglang.errors import MeasurementFailed

            self._fail(MeasurementFailed(broken))
        return result

    def _fill(
        self,
        handle: SGLangServer,
        workload: Workload,
        concurrency: int,
        repeats: int,
        key: _Key,
        *,
        load: OpenLoop | None = None,
    ) -> None:
        """Measure ``repeats`` runs on ``handle`` into the session cache (``load``: open loop)."""
        __tracebackhide__ = True
        runs: list[Measurement] = []
        try:
            self._runner.repeated(handle, workload, concurrency, repeats, runs, load=load)
        except Interrupted as stop:  # reported, not cached
            runs.append(stop.measurement)
            partial = self._result(handle, workload, concurrency, runs, "blocks", load=load)
            self._record(partial, handle)
            self._fail(stop.error)
        except BaseException as error:  # a test timeout or Ctrl-C
            self._record_cut(handle, workload, concurrency, runs, repeats, error, load=load)
            raise
        self._cache[key] = self._result(handle, workload, concurrency, runs, "blocks", load=load)

    def take_declared(self, server: SGLangServer) -> None:
        """Take every measurement the selected tests declared for ``server``, now it is up.

        The pool calls this after a launch. One that fails is not cached: its test measures
        again and fails with its own message.
        """
        pending = [
            declared
            for declared in self._plans.for_server(server.name)
            if self._key(server.name, declared.workload, declared.concurrency, declared.repeats)
            not in self._cache
        ]
        if not pending:
            return
        self._progress(
            f"sglang: {server.name!r} is up: taking the {len(pending)} measurement(s) declared "
            f"for it ({', '.join(d.label() for d in pending)})"
        )

        def keep_cut(result: BenchResult, handle: SGLangServer | None) -> None:
            if result.cut is not None and handle is not None:  # Ctrl-C: reported at the end
                self._unrecorded_cuts.append((result, handle))

        quiet = self.with_recorder(keep_cut)
        for number, declared in enumerate(pending, 1):
            key = self._key(server.name, declared.workload, declared.concurrency, declared.repeats)
            started = time.monotonic()
            try:
                check_fills(declared.workload, declared.concurrency)
                quiet._fill(server, declared.workload, declared.concurrency, declared.repeats, key)
            except Exception as exc:  # the declaring test measures again, and says why
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self._progress(
                    f"sglang: the declared measurement {declared.label()} failed: {first}"
                )
                if self.pool.check(server.name) is not None:
                    return  # the server died: the tests that need it fail naming the death
                continue
            self._progress(
                f"sglang: declared measurement {number}/{len(pending)} of {server.name!r} "
                f"done: {declared.label()} in {time.monotonic() - started:.0f}s"
            )

    def _undeclared(self, key: _Key, concurrency: int) -> str:
        """Say why a launch for this measurement may be a relaunch (for the summary)."""
        if not len(self._plans) or self._plans.declares(key):
            return ""
        return (
            f"a measurement no selected test declared ({key[0]} @ C={concurrency}, "
            f"x{key[3]}): add it to the test's @pytest.mark.sglang_measure so that it is "
            "taken while the server is up"
        )

    def _record_cut(
        self,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        runs: list[Measurement],
        repeats: int,
        error: BaseException,
        *,
        load: OpenLoop | None = None,
        schedule: Schedule = "blocks",
    ) -> None:
        """Record the runs of a measurement something cut short, saying what (not cached)."""
        from pytest_sglang.measure.measurement import measure

        interrupted = self._runner.take_cut(server.name)
        finished = list(runs)
        if interrupted is not None and interrupted.measured:
            try:
                finished.append(packed(measure(interrupted)))
            except ValueError:
                pass  # too little to measure: the finished runs stand alone
        if not finished:
            return  # nothing finished: the test's own failure says what cut it
        cut = f"{cut_by(error)}, in run {len(runs) + 1} of {repeats}"
        result = self._result(server, workload, concurrency, finished, schedule, load=load)
        self._record(replace(result, cut=cut, finished_runs=len(runs)), server)
        self._progress(f"sglang: the measurement {result.label()} was cut: {cut}")

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
        if concurrency is None and rate is None:
            raise ValueError(
                "run_once measures a closed loop (concurrency=C) or an open loop (rate=R): give one"
            )
        load = open_loop_of(concurrency, rate, arrival, max_concurrency)
        if load is None:
            (level,) = levels_of(concurrency)
            check_fills(workload, level)
        else:
            level = load.max_concurrency or 0
        handle = self._server(server) if isinstance(server, str) else server
        try:
            with self.pool.measuring(handle, during=self._during):
                return self._runner.run(handle, workload, level, repeat, repeat + 1, load=load)
        except Interrupted as stop:
            self._fail(stop.error)

    def _result(
        self,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        runs: list[Measurement],
        schedule: Schedule,
        *,
        load: OpenLoop | None = None,
    ) -> BenchResult:
        """Return the result of ``runs``, keeping ``server`` for the report."""
        self._handles[server.name] = server
        return BenchResult.of(server, workload, concurrency, runs, schedule, load=load)
