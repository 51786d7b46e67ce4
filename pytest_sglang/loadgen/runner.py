"""The load engine: one run loop that sends a run's requests and records each one.

:meth:`LoadGenerator.run` takes a workload and a :data:`~pytest_sglang.loadgen.schedule.Load`;
the blocking facade, the worker processes and the Ray actors all call it. Warm-up requests go
first (excluded from the metrics). Every request sent gets a record, failed or not; one never
sent gets none. Timeouts, retries, connection habits: ``docs/metrics.md``. Timestamps are
``time.perf_counter()``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from pytest_sglang.config.options import (
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_MAX_CONSECUTIVE_FAILURES,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_STALL_TIMEOUT,
)
from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.progress import (
    ClientLoad,
    ClientMonitor,
    ProgressCallback,
    ProgressTicker,
    Tally,
    no_progress,
)
from pytest_sglang.loadgen.prompts import encoded_bodies
from pytest_sglang.loadgen.records import ConnectionHabits, LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import Arrival, ClosedLoop, Load, OpenLoop, owner
from pytest_sglang.loadgen.streams import StreamParser
from pytest_sglang.loadgen.transport import Attempt, RetryFailed, describe, exchange, trace
from pytest_sglang.loadgen.watchdog import StallWatchdog
from pytest_sglang.loadgen.workload import DEFAULT_WARMUP_CAP, Workload, check_count

__all__ = ["CacheFlushFailed", "LoadGenerator", "ServerStoppedAnswering", "Shard", "run_blocking"]

T = TypeVar("T")


class ServerStoppedAnswering(SGLangError):
    """A run gave up: the server stopped answering (consecutive transport failures/timeouts).

    ``run`` holds the records of the requests that were sent; ``unsent`` counts the others.
    """

    def __init__(self, message: str, run: LoadRun, unsent: int) -> None:
        super().__init__(message)
        self.run = run
        self.unsent = unsent


class CacheFlushFailed(SGLangError):
    """The server did not empty its prefix cache when asked (``flush_cache``)."""


@dataclass(frozen=True)
class Shard:
    """Worker ``index`` of ``len(shares)``: its slots, its requests, the common start.

    ``shares[index]`` is its share of the concurrency (or of the open loop's cap); it sends
    the requests :func:`~pytest_sglang.loadgen.schedule.owner` gives it, warm-up and measured
    alike. ``sync`` blocks until every worker has warmed up and returns the common start;
    ``finished`` receives each measured request as it ends (a :class:`Relay`'s).
    """

    index: int
    shares: tuple[int, ...]
    sync: Callable[[], float]
    finished: Callable[[RequestRecord], None] | None = None


@dataclass(eq=False)
class LoadGenerator:
    """Runs workloads against one server (``url``) and returns a :class:`LoadRun` per run.

    ``request_timeout`` bounds a whole request; ``stall_timeout`` a stream's silence once its
    first event came; ``first_token_timeout`` the wait for a first token while the whole run
    gets none; ``max_consecutive_failures`` unanswered requests in a row raise
    :class:`ServerStoppedAnswering` (``None`` for each: no limit). ``progress`` is called at
    most every ``progress_interval`` seconds; ``before_measured`` (on a worker thread) right
    before the measured requests, where a caller takes its "before" readings. ``flush_cache``
    empties the server's prefix cache before every run. ``shard`` is this generator's part of
    a run spread over workers; ``connections`` the server's known connection habits.
    """

    url: str = field(repr=False)  # it may carry a password (user:password@host)
    _: KW_ONLY
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] | None = field(default=None, repr=False)
    model: str = "default"
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    stall_timeout: float | None = DEFAULT_STALL_TIMEOUT
    first_token_timeout: float | None = DEFAULT_FIRST_TOKEN_TIMEOUT
    max_consecutive_failures: int | None = DEFAULT_MAX_CONSECUTIVE_FAILURES
    connect_timeout: float = 30.0
    progress: ProgressCallback = no_progress
    progress_interval: float = 1.0
    flush_cache: bool = False
    before_measured: Callable[[], object] | None = None
    shard: Shard | None = None
    connections: ConnectionHabits = field(default_factory=ConnectionHabits)
    #: The requests a run had finished when something interrupted it (a test timeout,
    #: Ctrl-C): what the caller may still report. None until a run is interrupted.
    interrupted_run: LoadRun | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        seconds = ("request_timeout", "stall_timeout", "first_token_timeout", "connect_timeout")
        for name in (*seconds, "progress_interval"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        if self.max_consecutive_failures is not None:
            check_count("max_consecutive_failures", self.max_consecutive_failures)
        self.url = self.url.rstrip("/")
        # identity: a compressed event stream costs both sides CPU for nothing.
        self._headers = {"Content-Type": "application/json", "Accept-Encoding": "identity"}
        self._headers.update(self.headers or {})
        if self.api_key:
            self._headers["Authorization"] = f"Bearer {self.api_key}"
        #: What a worker process needs to build the same generator (picklable values only).
        kept = (*seconds, "model", "max_consecutive_failures", "flush_cache", "connections")
        self.options: dict[str, Any] = {name: getattr(self, name) for name in kept}
        self.options.update(url=self.url, headers=dict(self._headers))

    def client(self, connections: int, *, reuse: bool = True) -> httpx.AsyncClient:
        """Return a client with a pool of ``connections``; ``reuse=False``: one per request.

        httpx's API on the aiohttp transport, the cheaper per streamed token (``docs/metrics.md``,
        "Client cost"), with the trace of what the pool did (``transport``).
        """

        def session() -> aiohttp.ClientSession:
            keep: dict[str, Any] = {"keepalive_timeout": 5.0} if reuse else {"force_close": True}
            connector = aiohttp.TCPConnector(limit=connections, **keep)
            return aiohttp.ClientSession(connector=connector, trace_configs=[trace()])

        # trust_env=False: an HTTP(S)_PROXY in the environment would route a load test
        # through a proxy (on httpx's default transport, too), measuring the proxy.
        return httpx.AsyncClient(
            base_url=self.url,
            transport=AiohttpTransport(client=session),
            headers=self._headers,
            # No read timeout: request_timeout bounds a long queue, the watchdog a stall.
            timeout=httpx.Timeout(None, connect=self.connect_timeout),
            trust_env=False,
        )

    async def run(self, workload: Workload, load: Load, *, repeat: int = 0) -> LoadRun:
        """Send ``workload``'s requests as ``load`` says, and record each one.

        Each ``repeat`` sends different prompts, so the server's prefix cache holds none.
        """
        return await _Run(self, workload, load, repeat).run()

    def run_closed_loop(self, workload: Workload, concurrency: int, *, repeat: int = 0) -> LoadRun:
        """Run ``workload`` with exactly ``concurrency`` requests in flight (a closed loop).

        Blocking (its own event loop, see :func:`run_blocking`). Awaitable: :meth:`run` with a
        ``ClosedLoop``.
        """
        return run_blocking(self.run(workload, ClosedLoop(concurrency), repeat=repeat))

    def run_open_loop(
        self,
        workload: Workload,
        rate: float,
        *,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> LoadRun:
        """Send ``workload``'s requests at ``rate`` per second, regardless of completions.

        Blocking (its own event loop, see :func:`run_blocking`). ``arrival``: ``"poisson"``
        (seeded by the workload's seed) or ``"constant"``; ``max_concurrency`` caps the
        requests in flight (:class:`OpenLoop`). Awaitable: :meth:`run` with an ``OpenLoop``.
        """
        load = OpenLoop(rate, arrival, max_concurrency)
        return run_blocking(self.run(workload, load, repeat=repeat))

    def run_sweep(
        self, workload: Workload, concurrencies: Sequence[int], *, repeat: int = 0
    ) -> list[LoadRun]:
        """Run ``workload`` closed-loop at each concurrency in turn (blocking), a run per level."""
        for level in concurrencies:
            check_count("each concurrency", level)
        return [self.run_closed_loop(workload, c, repeat=repeat) for c in concurrencies]


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a new event loop and return its result.

    pytest-timeout raises from a ``SIGALRM`` handler in whatever frame runs; inside one of
    asyncio's callbacks that exception is swallowed and logged, and the run would go on past
    the test's limit. The coroutine therefore runs on its own event loop in a worker thread
    while the caller's thread only waits: there a signal handler's exception (or Ctrl-C)
    cancels the run, waits for it to end (its finished part is kept), and propagates.
    Callable from a thread already running an event loop (an ``async def`` test calling
    ``sglang_bench``), whose loop waits, blocked (await the async API to keep it running).
    """
    tasks: list[asyncio.Task[T]] = []
    interrupted: list[bool] = []

    async def tracked() -> T:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        if interrupted:  # struck before the run began
            coroutine.close()
            raise asyncio.CancelledError
        return await coroutine

    with ThreadPoolExecutor(1, thread_name_prefix="pytest-sglang-loadgen") as worker:
        future = worker.submit(asyncio.run, tracked())
        try:
            return future.result()
        except BaseException:
            # Raised here (a test timeout, Ctrl-C): the run must not go on without us.
            interrupted.append(True)
            if tasks and not future.done():
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    tasks[0].get_loop().call_soon_threadsafe(tasks[0].cancel)
            raise


class _Run:
    """One run: its records, and what its requests share (clients, watchdog, failure streak).

    ``max_consecutive_failures`` requests in a row without an answer set :attr:`aborted`, and
    the requests still in flight (waiting on the same silent server) are cut at once.
    """

    def __init__(self, gen: LoadGenerator, workload: Workload, load: Load, repeat: int) -> None:
        self.gen, self.workload, self.load, self.repeat = gen, workload, load, repeat
        salt, shard = load.salt(repeat), gen.shard

        def phase(name: str, count: int) -> tuple[list[RequestRecord], list[bytes]]:
            # Each record keeps its own requested lengths (a distribution draws them); the
            # bodies are encoded before the run, off the timed path. A shard keeps its own
            # requests only, a session on one worker.
            key = f"{salt}/{name}"
            records = [
                RequestRecord(i, name == "warmup", *workload.lengths(key, i))
                for i in range(count)
                if shard is None or owner(workload.session(i)[0], shard.shares) == shard.index
            ]
            return records, encoded_bodies(workload, key, count, model=gen.model)

        warmup = workload.warmup_for(load.slots or DEFAULT_WARMUP_CAP)
        self.warm, self.warm_bodies = phase("warmup", warmup)
        self.main, self.main_bodies = phase("measured", workload.requests)
        # Arrival units are sessions; every shard draws the same schedule and keeps its own.
        arrivals = workload.session(workload.requests - 1)[0] + 1
        self.offsets = load.offsets(arrivals, f"{workload.seed}/{salt}")
        # A shard keeps its share of the slots: that many in flight over all the workers.
        self.slots = (
            load.slots if shard is None or load.slots is None else shard.shares[shard.index]
        )
        # Fully open: every request may be in flight at once, so the pool must not queue them.
        self.connections = self.slots or max(workload.requests, warmup)
        self.tally = Tally(len(self.warm) + len(self.main))
        self.watchdog = StallWatchdog(gen.stall_timeout, gen.first_token_timeout)
        self.clients: dict[bool, httpx.AsyncClient] = {}
        self.streak = 0  # requests in a row that ended without an answer
        self.aborted: str | None = None  # why the run stopped sending
        self.started = time.perf_counter()
        self.client_load: ClientLoad | None = None

    def recorded(self) -> LoadRun:
        """Return the run so far: requests never sent have no record (none was asked)."""
        return LoadRun(
            workload=self.workload,
            records=tuple(r for r in self.warm + self.main if r.end is not None),
            started=self.started,
            repeat=self.repeat,
            client=self.client_load,
            load=self.load,
        )

    def client(self, *, fresh: bool = False) -> httpx.AsyncClient:
        """Return the pooled client, or (``fresh``, a server that closes) one per request."""
        reuse = not fresh and self.gen.connections.closes_after_response is not True
        if reuse not in self.clients:
            self.clients[reuse] = self.gen.client(self.connections, reuse=reuse)
        return self.clients[reuse]

    async def run(self) -> LoadRun:
        gen, shard, warm = self.gen, self.gen.shard, self.warm
        ticker = ProgressTicker(gen.progress, self.tally, self.started, gen.progress_interval)
        ticker.start()
        self.watchdog.start()
        try:
            if gen.flush_cache and (shard is None or shard.index == 0):
                await self._flush()
            await self._drive(warmup=True)
            if warm and gen.connections.closes_after_response is None and all(r.ok for r in warm):
                # Learn the server's connection habit once its warm-up is over: a copy of its
                # last request (in no record, no progress) on the pooled client; a reused
                # connection shows the server keeps them, a new one that it closes them.
                last = warm[-1]
                copy = RequestRecord(last.index, True, last.input_len, last.output_len)
                await self._send(copy, probe=True)
            origin = None
            if shard is not None:
                self.client()  # built now: the first measured request must not wait for it
                # Every worker finished its warm-up: the measured requests start together.
                origin = await asyncio.to_thread(shard.sync)
            if self.aborted is None and gen.before_measured is not None:
                await asyncio.to_thread(gen.before_measured)
            if self.aborted is None:
                monitor = ClientMonitor()  # the client's own load, measured requests only
                monitor.start()
                try:
                    await self._drive(warmup=False, origin=origin)
                finally:
                    self.client_load = await monitor.stop()
        except BaseException:
            # A test timeout or Ctrl-C: keep what finished, for the report, and propagate.
            gen.interrupted_run = self.recorded()
            raise
        finally:
            await ticker.stop()
            await self.watchdog.halt()
            for client in self.clients.values():
                await client.aclose()
        run = self.recorded()
        if self.aborted is not None:
            sent, total = len(run.records), self.tally.total
            message = (
                f"{self.aborted}; the run was stopped with {total - sent} of {total} requests "
                f"not sent ({sent} sent)"
            )
            raise ServerStoppedAnswering(message, run, total - sent)
        return run

    async def _drive(self, warmup: bool, origin: float | None = None) -> None:
        """Send the warm-up's or the measured requests, at most ``slots`` at once, on time.

        An arrival is a session (its turns in order) or a single request, due at its offset
        from ``origin`` (now, or a sharded run's common start; the warm-up's all at once); a
        free slot takes the next due one. A closed loop's slot holds a whole session; a capped
        open loop's cap is on requests, so a session's next turn queues for a slot again.
        """
        records, offsets = (self.warm, None) if warmup else (self.main, self.offsets)
        slots = self.slots
        requeue = slots is not None and offsets is not None
        due: collections.deque[list[RequestRecord]] = collections.deque()
        tasks: list[asyncio.Task[None]] = []
        busy = 0

        async def slot() -> None:
            nonlocal busy
            try:
                while due:
                    turns = due.popleft()
                    for turn, record in enumerate(turns, 1):
                        if self.aborted is not None:
                            return
                        await self._send(record)
                        if requeue and turn < len(turns):
                            due.append(turns[turn:])
                            break
            finally:
                busy -= 1

        origin = time.perf_counter() if origin is None else origin
        session = self.workload.session
        for unit, group in itertools.groupby(records, lambda record: session(record.index)[0]):
            turns = list(group)
            if offsets is not None:
                at = origin + offsets[unit]
                if at > time.perf_counter():
                    await asyncio.sleep(at - time.perf_counter())
                if self.aborted is not None:
                    break
                turns[0].scheduled = at
            due.append(turns)
            if slots is None or busy < slots:
                busy += 1
                tasks.append(asyncio.create_task(slot()))
        await asyncio.gather(*tasks)

    async def _flush(self) -> None:
        # ?timeout: SGLang 0.5.23 waits that long for running requests to finish first (as
        # bench_serving asks); older releases ignore it and refuse with 400 while busy.
        response = await self.client().post("/flush_cache", params={"timeout": 60})
        if response.status_code != 200:
            raise CacheFlushFailed(
                f"POST {self.gen.url}/flush_cache answered {response.status_code}: "
                f"{response.text[:200]!r}; the server's prefix cache could not be emptied "
                "before the run (drop flush_cache, or let the server go idle first)"
            )

    async def _send(self, record: RequestRecord, probe: bool = False) -> None:
        """Send one request and record it, failed or not (never raises but to interrupt).

        ``probe``: the warm-up's probe of the server's connection habit, counted in no progress.
        """
        gen, watchdog, workload = self.gen, self.watchdog, self.workload
        tally = Tally(1) if probe else self.tally
        body = (self.warm_bodies if record.warmup else self.main_bodies)[record.index]
        parser = StreamParser(workload.endpoint, record, tally) if workload.stream else None
        unanswered = False  # the request ended without an answer from the server
        try:
            async with asyncio.timeout(gen.request_timeout) as deadline:
                watchdog.watch(record, deadline, parser)
                await self._attempts(record, body, parser, probe)
        except TimeoutError:
            unanswered = True
            record.fail(
                watchdog.expired(record)
                or f"timed out: no complete response within {gen.request_timeout:g} s "
                "(request_timeout; sglang_request_timeout under pytest); "
                f"{len(record.chunk_times)} token chunks had arrived"
            )
        except Exception as exc:  # recorded, never raised: the run keeps every request
            unanswered = record.status is None
            record.fail(describe(exc) + _lost_tail(record))
        finally:
            watchdog.forget(record)
            if record.end is None:
                record.end = time.perf_counter()
            if parser is None and record.ok:
                tally.tokens += record.output_tokens or 0  # streams count as chunks arrive
            tally.done += 1
            self._settle(record, unanswered)
            shard = gen.shard
            if shard is not None and shard.finished is not None and not record.warmup:
                shard.finished(record)  # to the coordinator, in case this worker is lost

    def _settle(self, record: RequestRecord, unanswered: bool) -> None:
        """Count a finished request towards (or reset) the unanswered streak."""
        self.streak = self.streak + 1 if unanswered else 0
        limit = self.gen.max_consecutive_failures
        if limit is not None and self.streak >= limit and self.aborted is None:
            self.aborted = (
                f"the server stopped answering: {self.streak} consecutive transport "
                f"failures/timeouts (max_consecutive_failures={limit}; last: {record.error})"
            )
            # The requests still in flight wait on the same silent server: end them now
            # rather than after their own timeouts (they were sent: their records stay).
            self.watchdog.cancel_all(self.aborted)

    async def _attempts(
        self, record: RequestRecord, body: bytes, parser: StreamParser | None, probe: bool
    ) -> None:
        """Send the request; once more on a fresh connection if a reused one was dead."""
        habits, first = self.gen.connections, None
        for fresh in (False, True):
            attempt = Attempt(record)
            try:
                client = self.client(fresh=fresh)
                await exchange(client, self.workload.endpoint, attempt, body, parser)
                break
            except Exception as exc:
                kind = describe(exc)
                if first is not None:
                    raise RetryFailed(
                        f"{kind} (on a fresh connection, after the pooled one failed: {first})"
                    ) from exc
                # Only a failure before any response byte, on a connection an earlier
                # request had used: the server closed it while it idled in the pool. Anything
                # else (a response began, a fresh connection failed) is the server's.
                if not (attempt.reused and record.status is None and kind.startswith(_LOST)):
                    raise
                first = kind
                record.retries += 1
                habits.closes(f"a reused connection failed before any response byte: {kind}")
        # (After a retry the server is known to close: these change nothing.)
        if attempt.close:
            habits.closes("a response said Connection: close")
        elif attempt.reused:
            habits.keeps("a pooled connection served a second request")
        elif attempt.created and probe:
            habits.closes(
                "the server had closed the connection of the request before (the "
                "warm-up's probe needed a new one)"
            )


#: The kinds of transport failure that say a connection was lost (see ``describe``).
_LOST = ("connection reset", "server closed the connection", "connection lost")


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
