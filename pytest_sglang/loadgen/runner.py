"""The load engine: one run loop that sends a run's requests and records each one.

:meth:`LoadGenerator.run` takes a workload and a :data:`~pytest_sglang.loadgen.schedule.Load`;
the blocking facade, the worker processes and the Ray actors all call it, a
:class:`~pytest_sglang.loadgen.schedule.Shard` telling a worker which requests are its own.
Warm-up requests go first (excluded from the metrics). Every request sent gets a record,
failed or not; one never sent gets none. Timeouts, retries, connection habits and
:class:`ServerStoppedAnswering`: ``docs/metrics.md``. Timestamps are ``time.perf_counter()``.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from pytest_sglang.config.defaults import (
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_MAX_CONSECUTIVE_FAILURES,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STALL_TIMEOUT,
)
from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.blocking import run_blocking
from pytest_sglang.loadgen.habits import ConnectionHabits
from pytest_sglang.loadgen.progress import ProgressCallback, ProgressTicker, Tally, no_progress
from pytest_sglang.loadgen.prompts import encoded_bodies
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.runstate import RunState
from pytest_sglang.loadgen.saturation import ClientLoad, ClientMonitor
from pytest_sglang.loadgen.schedule import (
    Arrival,
    ClosedLoop,
    Load,
    OpenLoop,
    Shard,
    check_count,
    run_fields,
)
from pytest_sglang.loadgen.streams import StreamParser, stream_parser
from pytest_sglang.loadgen.transport import (
    Attempt,
    RetryFailed,
    connection_lost,
    describe,
    exchange,
    http_client,
)
from pytest_sglang.loadgen.watchdog import StallWatchdog
from pytest_sglang.loadgen.workload import Workload

__all__ = [
    "DEFAULT_FIRST_TOKEN_TIMEOUT",
    "DEFAULT_MAX_CONSECUTIVE_FAILURES",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_STALL_TIMEOUT",
    "CacheFlushFailed",
    "LoadGenerator",
    "ServerStoppedAnswering",
    "run_blocking",
]


class ServerStoppedAnswering(SGLangError):
    """A run gave up: the server stopped answering (consecutive transport failures/timeouts).

    ``run`` holds the records of the requests that were sent (none is made up for the
    others); ``unsent`` is how many were never sent.
    """

    def __init__(self, message: str, run: LoadRun, unsent: int) -> None:
        super().__init__(message)
        self.run = run
        self.unsent = unsent


class CacheFlushFailed(SGLangError):
    """The server did not empty its prefix cache when asked (``flush_cache``)."""


class LoadGenerator:
    """Runs workloads against one server and returns a :class:`LoadRun` per run.

    :param url: the server's base URL, e.g. ``http://127.0.0.1:30000``.
    :param api_key: sent as ``Authorization: Bearer <key>`` when set.
    :param headers: extra headers for every request.
    :param model: the OpenAI ``model`` field (SGLang echoes it; the served name is polite).
    :param request_timeout: seconds a request may take in all before it is recorded as failed.
    :param stall_timeout: seconds a stream may go without a new token, once its first event
        arrived, before the request is recorded as failed (stalled); ``None`` leaves only
        ``request_timeout``.
    :param first_token_timeout: seconds a streamed request may wait for its first token while
        the whole run receives no token (only a frozen server is silent that long); ``None``
        leaves only ``request_timeout``.
    :param max_consecutive_failures: after this many requests in a row ended without an answer
        (transport failure or timeout), stop sending and raise :class:`ServerStoppedAnswering`;
        ``None`` tries every request.
    :param connect_timeout: seconds to open a connection.
    :param progress: called with ``(done, total, output_tokens, elapsed)`` at most every
        ``progress_interval`` seconds during a run, and once at its end.
    :param before_measured: called (on a worker thread) once the warm-up is over, right before
        the measured requests: where a caller takes its "before" readings (``/metrics``,
        GPU telemetry) so that they cover the measured requests only.
    :param flush_cache: empty the server's prefix cache (``POST /flush_cache``) before every
        run, so no run finds prompts an earlier one left; a server that cannot flush raises
        :class:`CacheFlushFailed`.
    :param shard: this generator's part of a run spread over several workers (set by
        :mod:`pytest_sglang.loadgen.workers`, which is how to run one).
    :param connections: what is known of the server's connection habits, shared by every
        generator for that server (the server handle's); a new, unknown one by default.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        model: str = "default",
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
        first_token_timeout: float | None = DEFAULT_FIRST_TOKEN_TIMEOUT,
        max_consecutive_failures: int | None = DEFAULT_MAX_CONSECUTIVE_FAILURES,
        connect_timeout: float = 30.0,
        progress: ProgressCallback = no_progress,
        progress_interval: float = 1.0,
        flush_cache: bool = False,
        before_measured: Callable[[], object] | None = None,
        shard: Shard | None = None,
        connections: ConnectionHabits | None = None,
    ) -> None:
        for name, value in (
            ("request_timeout", request_timeout),
            ("stall_timeout", stall_timeout),
            ("first_token_timeout", first_token_timeout),
            ("connect_timeout", connect_timeout),
            ("progress_interval", progress_interval),
        ):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if max_consecutive_failures is not None:
            check_count("max_consecutive_failures", max_consecutive_failures)
        self.url = url.rstrip("/")
        self.model = model
        self.request_timeout = float(request_timeout)
        self.stall_timeout = None if stall_timeout is None else float(stall_timeout)
        self.first_token_timeout = (
            None if first_token_timeout is None else float(first_token_timeout)
        )
        self.max_consecutive_failures = max_consecutive_failures
        # identity: a compressed event stream would cost both sides CPU for nothing, and lets
        # the body be read raw, without httpx's decoder layer on every chunk.
        self._headers = {
            "Content-Type": "application/json",
            "Accept-Encoding": "identity",
            **(headers or {}),
        }
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        # No read timeout: the first token may come after a long queue (request_timeout
        # bounds that), and a stall after it is the watchdog's, which costs nothing per read.
        self._timeout = httpx.Timeout(None, connect=connect_timeout)
        self._progress = progress
        self._progress_interval = progress_interval
        self._shard = shard
        self.connections = ConnectionHabits() if connections is None else connections
        self.flush_cache = flush_cache
        #: The requests a run had finished when something interrupted it (a test timeout,
        #: Ctrl-C): what the caller may still report. None until a run is interrupted.
        self.interrupted_run: LoadRun | None = None
        self._before_measured = before_measured
        #: What a worker process needs to build the same generator (picklable values only).
        self.options: dict[str, Any] = {
            "url": self.url, "headers": dict(self._headers), "model": model,
            "request_timeout": request_timeout, "stall_timeout": stall_timeout,
            "first_token_timeout": first_token_timeout, "connect_timeout": connect_timeout,
            "max_consecutive_failures": max_consecutive_failures, "flush_cache": flush_cache,
            "connections": self.connections,
        }  # fmt: skip

    @property
    def progress(self) -> ProgressCallback:
        """The progress callback (what a run spread over workers reports to, summed)."""
        return self._progress

    def client(self, connections: int, *, reuse: bool = True) -> httpx.AsyncClient:
        """Return a client for this server with a pool of ``connections`` (see ``transport``).

        ``reuse=False`` opens a fresh connection for every request and closes it after.
        """
        return http_client(self.url, self._headers, self._timeout, connections, reuse=reuse)

    async def run(self, workload: Workload, load: Load, *, repeat: int = 0) -> LoadRun:
        """Send ``workload``'s requests as ``load`` says, and record each one.

        ``repeat`` numbers repeated runs of the same workload and load: each repeat sends
        different prompts, so the server's prefix cache holds none of them.
        """
        salt = load.salt(repeat)
        shard = self._shard
        warmup = load.warmup(workload)
        # A shard keeps its share of the slots: that many in flight over all the workers.
        slots = load.slots if shard is None or load.slots is None else shard.slots
        # The arrival units are sessions (a request is a session of one turn); every shard
        # draws the same schedule and keeps the offsets of its own units.
        arrivals = workload.session(workload.requests - 1)[0] + 1
        offsets = load.offsets(arrivals, f"{workload.seed}/{salt}")
        warm = _records(workload, warmup, warmup=True, salt=salt + "/warmup")
        main = _records(workload, workload.requests, warmup=False, salt=salt + "/measured")
        # Bodies are encoded before the run, so JSON encoding of long prompts is not on the
        # timed path between one request's end and the next one's send.
        warm_bodies = encoded_bodies(workload, salt + "/warmup", len(warm), model=self.model)
        main_bodies = encoded_bodies(workload, salt + "/measured", len(main), model=self.model)
        if shard is not None:  # this worker sends its own requests only, a session on one
            warm = [r for r in warm if shard.owns(workload.session(r.index)[0])]
            main = [r for r in main if shard.owns(workload.session(r.index)[0])]
        # Fully open: every request may be in flight at once, so the pool must not queue them.
        connections = slots or max(workload.requests, warmup)
        tally = Tally(len(warm) + len(main))
        timeouts = (self.stall_timeout, self.first_token_timeout)
        watchdog = StallWatchdog(*timeouts) if any(timeouts) else None
        state = RunState(
            self.client,
            self.connections,
            self.max_consecutive_failures,
            connections,
            tally,
            watchdog,
        )
        started = time.perf_counter()
        client: ClientLoad | None = None

        def recorded() -> LoadRun:
            # Requests never sent have no record: a made-up failure would count against the
            # server as if it had been asked.
            sent = tuple(r for r in warm + main if r.end is not None)
            return LoadRun(
                workload=workload,
                records=sent,
                started=started,
                repeat=repeat,
                client=client,
                **run_fields(load),
            )

        ticker = ProgressTicker(self._progress, tally, started, self._progress_interval)
        ticker.start()
        watching = asyncio.create_task(watchdog.run()) if watchdog else None
        try:
            if self.flush_cache and (shard is None or shard.index == 0):
                await self._flush(state)
            if warm:
                await self._drive(workload, warm, warm_bodies, state, min(warmup, connections))
                if self.connections.closes_after_response is None and all(r.ok for r in warm):
                    await self._probe(workload, warm[-1], state, warm_bodies[warm[-1].index])
            if shard is not None:
                state.client()  # built now: the first measured request must not wait for it
                # Every worker finished its warm-up: the measured requests start together.
                state.origin = await asyncio.to_thread(shard.sync)
            if state.aborted is None and self._before_measured is not None:
                await asyncio.to_thread(self._before_measured)
            if state.aborted is None:
                monitor = ClientMonitor()  # the client's own load, measured requests only
                monitor.start()
                try:
                    await self._drive(workload, main, main_bodies, state, slots, offsets)
                finally:
                    client = await monitor.stop()
        except BaseException:
            # A test timeout or Ctrl-C (raised here, or a cancellation when it struck the
            # event loop): keep what finished, for the report, and let it propagate.
            self.interrupted_run = recorded()
            raise
        finally:
            await ticker.stop()
            if watching is not None:
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)
            await state.close()
        run = recorded()
        if state.aborted is not None:
            total = len(warm) + len(main)
            unsent = total - len(run.records)
            raise ServerStoppedAnswering(
                f"{state.aborted}; the run was stopped with {unsent} of {total} requests not "
                f"sent ({len(run.records)} sent)",
                run,
                unsent,
            )
        return run

    async def _drive(
        self,
        workload: Workload,
        records: list[RequestRecord],
        bodies: list[bytes],
        state: RunState,
        slots: int | None,
        offsets: list[float] | None = None,
    ) -> None:
        """Send ``records``, at most ``slots`` at once, each arrival due at its offset.

        ``slots`` ``None``: no limit; ``offsets`` ``None``: every arrival is due at once. An
        arrival is a session (its turns in order) or a single request; a free slot takes the
        next due arrival. A closed loop's slot holds a whole session; a capped open loop's
        cap is on requests, so a session's next turn queues for a slot again.
        """
        requeue = slots is not None and offsets is not None
        units: dict[int, list[RequestRecord]] = {}
        for record in records:
            units.setdefault(workload.session(record.index)[0], []).append(record)
        due: collections.deque[list[RequestRecord]] = collections.deque()
        tasks: list[asyncio.Task[None]] = []
        busy = 0

        async def slot() -> None:
            nonlocal busy
            try:
                while due:
                    turns = due.popleft()
                    for turn, record in enumerate(turns, 1):
                        if state.aborted is not None:
                            return
                        await self._send(workload, record, bodies[record.index], state)
                        if requeue and turn < len(turns):
                            due.append(turns[turn:])
                            break
            finally:
                busy -= 1

        origin = time.perf_counter() if state.origin is None else state.origin
        for unit, turns in units.items():
            if offsets is not None:
                at = origin + offsets[unit]
                delay = at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if state.aborted is not None:
                    break
                turns[0].scheduled = at
            due.append(turns)
            if slots is None or busy < slots:
                busy += 1
                tasks.append(asyncio.create_task(slot()))
        await asyncio.gather(*tasks)

    async def _flush(self, state: RunState) -> None:
        # ?timeout: SGLang 0.5.23 waits that long for running requests to finish first (as
        # bench_serving asks); older releases ignore it and refuse with 400 while busy.
        response = await state.client().post("/flush_cache", params={"timeout": 60})
        if response.status_code != 200:
            raise CacheFlushFailed(
                f"POST {self.url}/flush_cache answered {response.status_code}: "
                f"{response.text[:200]!r}; the server's prefix cache could not be emptied "
                "before the run (drop flush_cache, or let the server go idle first)"
            )

    async def _probe(
        self, workload: Workload, last: RequestRecord, state: RunState, body: bytes
    ) -> None:
        """Learn the server's connection habit once its warm-up is over.

        A copy of the warm-up's last request (kept in no record, counted in no progress),
        sent on the pooled client: reusing a warm-up connection shows the server keeps them;
        a retry or a new connection shows it closes them after a response.
        """
        copy = RequestRecord(
            index=last.index, warmup=True, input_len=last.input_len, output_len=last.output_len
        )
        tally, state.tally, state.probing = state.tally, Tally(1), True
        try:
            await self._send(workload, copy, body, state)
        finally:
            state.tally, state.probing = tally, False

    async def closed_loop(
        self, workload: Workload, concurrency: int, *, repeat: int = 0
    ) -> LoadRun:
        """Run ``workload`` with exactly ``concurrency`` requests in flight (a closed loop)."""
        return await self.run(workload, ClosedLoop(concurrency), repeat=repeat)

    async def open_loop(
        self,
        workload: Workload,
        rate: float,
        *,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> LoadRun:
        """Send ``workload``'s requests at ``rate`` per second, regardless of completions.

        ``arrival`` is ``"poisson"`` (exponential gaps from a generator seeded by the
        workload's seed) or ``"constant"``; ``max_concurrency`` caps the requests in flight
        (:class:`OpenLoop`).
        """
        return await self.run(workload, OpenLoop(rate, arrival, max_concurrency), repeat=repeat)

    async def sweep(
        self, workload: Workload, concurrencies: Sequence[int], *, repeat: int = 0
    ) -> list[LoadRun]:
        """Run ``workload`` closed-loop at each concurrency in turn, one run per level."""
        for level in concurrencies:
            check_count("each concurrency", level)
        return [await self.closed_loop(workload, c, repeat=repeat) for c in concurrencies]

    def run_closed_loop(self, workload: Workload, concurrency: int, *, repeat: int = 0) -> LoadRun:
        """Blocking :meth:`closed_loop` (runs its own event loop, see :func:`run_blocking`)."""
        return run_blocking(self.closed_loop(workload, concurrency, repeat=repeat))

    def run_open_loop(
        self,
        workload: Workload,
        rate: float,
        *,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> LoadRun:
        """Blocking :meth:`open_loop` (runs its own event loop, see :func:`run_blocking`)."""
        return run_blocking(
            self.open_loop(
                workload, rate, arrival=arrival, max_concurrency=max_concurrency, repeat=repeat
            )
        )

    def run_sweep(
        self, workload: Workload, concurrencies: Sequence[int], *, repeat: int = 0
    ) -> list[LoadRun]:
        """Blocking :meth:`sweep` (runs its own event loop, see :func:`run_blocking`)."""
        return run_blocking(self.sweep(workload, concurrencies, repeat=repeat))

    async def _send(
        self,
        workload: Workload,
        record: RequestRecord,
        body: bytes,
        state: RunState,
    ) -> None:
        tally, watchdog = state.tally, state.watchdog
        parser = stream_parser(workload.endpoint, record, tally) if workload.stream else None
        # Whether the request ended without an answer from the server (see RunState.settle).
        unanswered = False
        try:
            async with asyncio.timeout(self.request_timeout) as deadline:
                state.inflight[id(record)] = deadline
                if watchdog is not None and parser is not None:
                    watchdog.watch(record, deadline, parser)
                await self._attempts(workload, record, body, parser, state)
        except TimeoutError:
            unanswered = True
            expiry = watchdog.expired(record) if watchdog is not None else None
            if id(record) in state.cancelled:
                _fail(record, f"cancelled: the run stopped ({state.aborted})")
            elif expiry == "stall" and watchdog is not None:
                _fail(
                    record,
                    f"stalled: no new token for {watchdog.stall_timeout:g} s after "
                    f"{len(record.chunk_times)} token chunks (stall_timeout; "
                    "sglang_stall_timeout under pytest)",
                )
            elif expiry == "first_token":
                _fail(
                    record,
                    f"timed out waiting for the first token: no token for "
                    f"{self.first_token_timeout:g} s, for this request or any other "
                    f"(first_token_timeout; HTTP status {record.status})",
                )
            else:
                _fail(
                    record,
                    f"timed out: no complete response within {self.request_timeout:g} s "
                    f"(request_timeout; sglang_request_timeout under pytest); "
                    f"{len(record.chunk_times)} token chunks had arrived",
                )
        except Exception as exc:  # recorded, never raised: the run keeps every request
            unanswered = record.status is None
            _fail(record, describe(exc) + _lost_tail(record))
        finally:
            state.inflight.pop(id(record), None)
            if watchdog is not None:
                watchdog.forget(record)
            if record.end is None:
                record.end = time.perf_counter()
            if parser is None and record.ok:
                tally.tokens += record.output_tokens or 0  # streams count as chunks arrive
            tally.done += 1
            state.settle(record, unanswered)
            shard = self._shard
            if shard is not None and shard.finished is not None and not record.warmup:
                shard.finished(record)  # to the coordinator, in case this worker is lost

    async def _attempts(
        self,
        workload: Workload,
        record: RequestRecord,
        body: bytes,
        parser: StreamParser | None,
        state: RunState,
    ) -> None:
        """Send the request; once more on a fresh connection if a reused one was dead."""
        attempt = Attempt(record)
        habits = self.connections
        try:
            await exchange(state.client(), workload.endpoint, attempt, body, parser)
            if attempt.close:
                habits.closes("a response said Connection: close")
            elif attempt.reused:
                habits.keeps("a pooled connection served a second request")
            elif attempt.created and state.probing:
                habits.closes(
                    "the server had closed the connection of the request before (the "
                    "warm-up's probe needed a new one)"
                )
        except Exception as exc:
            # Only a failure before any response byte, on a connection an earlier request
            # had used: the server closed it while it idled in the pool. Anything else (a
            # response began, a fresh connection failed) is the server's and is recorded.
            if not (
                attempt.reused
                and record.status is None
                and not record.chunk_times
                and connection_lost(exc)
            ):
                raise
            first = describe(exc)
            record.retries += 1
            habits.closes(f"a reused connection failed before any response byte: {first}")
            try:
                fresh = state.client(fresh=True)
                await exchange(fresh, workload.endpoint, Attempt(record), body, parser)
            except Exception as retry_exc:
                raise RetryFailed(
                    f"{describe(retry_exc)} (on a fresh connection, after the pooled one "
                    f"failed: {first})"
                ) from retry_exc


def _records(workload: Workload, count: int, *, warmup: bool, salt: str) -> list[RequestRecord]:
    # Each record keeps its own requested lengths (a length distribution draws them).
    records = []
    for i in range(count):
        input_len, output_len = workload.lengths(salt, i)
        records.append(
            RequestRecord(index=i, warmup=warmup, input_len=input_len, output_len=output_len)
        )
    return records


def _lost_tail(record: RequestRecord) -> str:
    """Say so when a stream broke after its last requested token: only its tail was lost.

    A server that resets the connection discards what it had not sent yet (its small
    closing writes, held back by Nagle's algorithm).
    """
    arrived = sum(record.chunk_tokens)
    if record.status != 200 or arrived < record.output_len or record.finish_reason:
        return ""
    return (
        f" (after all {arrived} requested tokens arrived, before the finish chunk, usage, "
        "[DONE]: the server ended the connection with its tail unsent; a graceful close or "
        "TCP_NODELAY on the server keeps it)"
    )


def _fail(record: RequestRecord, message: str) -> None:
    if record.error is None:
        record.error = message
