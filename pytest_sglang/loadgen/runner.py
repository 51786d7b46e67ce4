"""The load generator: sends a workload's requests and records each one (async httpx).

Transport: httpx's API on the ``httpx-aiohttp`` transport. httpx's default transport
(httpcore + h11 + anyio) costs about three times the client CPU per streamed token of an
aiohttp client; the same httpx code on aiohttp's connection handling costs about the same as
bench_serving's aiohttp client (``docs/metrics.md``, "Client cost"). At tens of
thousands of tokens per second that is the difference between measuring the server and
measuring the client.

Load shapes:

- closed loop (:meth:`LoadGenerator.closed_loop`): exactly ``concurrency`` requests in
  flight; each finished request is replaced at once, until all are sent. The connection pool
  holds ``concurrency`` connections, so no request waits for a connection.
- open loop (:meth:`LoadGenerator.open_loop`): requests leave on a schedule (constant or
  seeded Poisson arrivals) whether or not earlier ones finished; ``max_concurrency`` optionally
  caps the requests in flight, and each record keeps its scheduled and actual send time so the
  measurement can show whether the schedule was kept.

Each run sends its warm-up requests first (closed loop, excluded from the metrics), waits for
them, then the measured ones. Every request sent gets a record: HTTP errors, transport
errors, malformed or incomplete streams and timeouts are failed records, never dropped.
A request is bounded by ``request_timeout`` seconds in all (a stream that trickles ends
there), a stream by ``stall_timeout`` seconds without a new token once its first event
has arrived, and the wait for the first token by ``first_token_timeout`` seconds during which
the whole run received no token (:mod:`~pytest_sglang.loadgen.watchdog`: a queued request
waits while others stream; on a frozen server nobody gets a token).

Frozen or vanished servers: after ``max_consecutive_failures`` requests in a row ended without
an answer (a transport failure or a timeout; an HTTP error is an answer), the run stops
sending, ends the requests in flight (recorded as cancelled), and raises
:class:`ServerStoppedAnswering`, which says how many requests were never sent (no record is
made up for them) and carries the records of those that were.

Connections: a request that fails on a *reused* pooled connection before any byte of
response is sent again, once, on a fresh connection (``RequestRecord.retries``). Servers
close idle keep-alive connections, and some close the connection after every streamed
response while still advertising keep-alive (llama.cpp's server, proxies, servers with a
``max`` keep-alive count); a closed loop reuses the connection the moment the stream ends,
before the close arrives, and the write fails. That is the client's problem, not a server
failure. A failure after response bytes arrived, or on a fresh connection, is never retried:
it is the server's. After the first such retry, or a response that says
``Connection: close``, the run stops reusing connections (a fresh one per request), and so
does every later run of every generator that shares the server's
:class:`~pytest_sglang.loadgen.habits.ConnectionHabits` (``connections=``; the bench passes
the server handle's). While the habit is not known, a run probes it once its warm-up is
over: a copy of the warm-up's last request, sent at once on the pooled client, as the first
measured request would be, so that the measured requests never race the server's close. A
run without a warm-up learns it from its first retry instead (the retry is not counted).

Send time: a record's ``sent`` is when aiohttp handed the request's bytes to the socket (its
``on_request_chunk_sent`` trace signal, which fires right before the write), not when the
load generator began the request (``started``). In a closed loop at C=64 a whole wave of
requests is sent at once, and the last of them leaves the client's event loop several
milliseconds after it began: that is the client's time, not the server's, and TTFT would
carry it (``benchmarks/loadgen_accuracy.py`` shows the difference).

All timestamps come from ``time.perf_counter()``.
"""

from __future__ import annotations

import asyncio
import contextvars
import errno
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, Literal

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

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
from pytest_sglang.loadgen.prompts import PATHS, encoded_bodies
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.saturation import ClientLoad, ClientMonitor
from pytest_sglang.loadgen.schedule import Arrival, arrival_offsets, check_arrival
from pytest_sglang.loadgen.shard import Shard
from pytest_sglang.loadgen.streams import (
    StreamParser,
    describe_http_error,
    parse_body,
    stream_parser,
)
from pytest_sglang.loadgen.watchdog import StallWatchdog
from pytest_sglang.loadgen.workload import DEFAULT_WARMUP_CAP, Workload

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


#: Encoded request bodies of one phase, by request index.
Bodies = list[bytes]


class _Attempt:
    """One attempt to send a request: its record, and whether it got a pooled connection."""

    __slots__ = ("close", "created", "record", "reused")

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        self.reused = False
        #: The pool opened a new connection for it.
        self.created = False
        #: The response said ``Connection: close``.
        self.close = False


#: The attempt the current task is sending. aiohttp writes a request's body in a task it
#: creates from the sending task, so the trace signals below see it too.
_SENDING: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar(
    "pytest_sglang_sending", default=None
)


async def _stamp_bytes_written(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    """Stamp the request's send time: aiohttp is about to write its body to the socket."""
    attempt = _SENDING.get()
    # The first body chunk only (the head goes out with it): later chunks of a long body
    # must not move the start of the clock.
    if attempt is not None and attempt.record.sent == attempt.record.started:
        attempt.record.sent = time.perf_counter()


async def _mark_reused(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    """Mark the attempt: the pool handed it a connection an earlier request used."""
    attempt = _SENDING.get()
    if attempt is not None:
        attempt.reused = True


async def _mark_created(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    """Mark the attempt: the pool opened a new connection for it."""
    attempt = _SENDING.get()
    if attempt is not None:
        attempt.created = True


def _wire_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_stamp_bytes_written)
    trace.on_connection_reuseconn.append(_mark_reused)
    trace.on_connection_create_end.append(_mark_created)
    return trace


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
    """Runs workloads against one server and returns a :class:`LoadRun` per load level.

    :param url: the server's base URL, e.g. ``http://127.0.0.1:30000``.
    :param api_key: sent as ``Authorization: Bearer <key>`` when set.
    :param headers: extra headers for every request.
    :param model: the OpenAI ``model`` field (SGLang echoes it; the served name is polite).
    :param request_timeout: seconds a request may take in all before it is recorded as failed.
    :param stall_timeout: seconds a stream may go without a new token, once its first event
        arrived, before the request is recorded as failed (stalled); ``None`` leaves only
        ``request_timeout``.
    :param first_token_timeout: seconds a streamed request may wait for its first token while
        the whole run receives no token; ``None`` leaves only ``request_timeout``. The default,
        90 s, is measured, with margin. On the emulator with EAGLE-3 under its default cap
        of 48 running requests, a closed loop at C=250 (500 requests, 32 tokens in, 256 out,
        ``benchmarks/queue_wait.py`` at speed-up 10, scaled back) queued requests for up to
        171 s real time before their first token (p50 139 s): a per-request limit would have
        to exceed that, and would then hold every request to a frozen server for minutes.
        But in that run the client never went more than 2.5 s real time without a token for
        some request (the longest silence, the first prefill included): 90 s is 36 times
        that. Only a frozen or dead server is silent for 90 s.
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
    :param shard: this generator's part of a run spread over several processes (set by
        :mod:`pytest_sglang.loadgen.workers`, which is how to run one; see there).
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
        self.url = url.rstrip("/")
        self.model = model
        self.request_timeout = float(request_timeout)
        self.stall_timeout = None if stall_timeout is None else float(stall_timeout)
        self.first_token_timeout = (
            None if first_token_timeout is None else float(first_token_timeout)
        )
        if max_consecutive_failures is not None:
            _check_count("max_consecutive_failures", max_consecutive_failures)
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

    # -- async API -------------------------------------------------------------------------

    async def closed_loop(
        self, workload: Workload, concurrency: int, *, repeat: int = 0
    ) -> LoadRun:
        """Run ``workload`` with exactly ``concurrency`` requests in flight.

        ``repeat`` numbers repeated runs of the same workload and level: each repeat sends
        different prompts, so the server's prefix cache holds none of them.
        """
        _check_count("concurrency", concurrency)
        warmup = workload.warmup_for(concurrency)

        # A shard keeps its share of the slots: C in flight over all the processes.
        slots = concurrency if self._shard is None else self._shard.slots

        async def measured(records: list[RequestRecord], state: _RunState, bodies: Bodies) -> None:
            await self._closed(workload, records, slots, state, bodies)

        return await self._run(
            workload,
            f"closed/c{concurrency}/r{repeat}",
            warmup=warmup,
            warmup_concurrency=min(warmup, slots),
            connections=slots,
            measured=measured,
            mode="closed",
            concurrency=concurrency,
            repeat=repeat,
        )

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
        workload's seed) or ``"constant"``. ``max_concurrency`` caps the requests in flight
        (requests then wait for a slot, and their records show the delay); ``None`` leaves
        the loop fully open. With multi-turn sessions (``Workload(turns=...)``) ``rate`` is
        sessions per second: each session's first turn leaves on the schedule, each later
        turn once the previous answer is complete.
        """
        check_arrival(rate, arrival)
        if max_concurrency is not None:
            _check_count("max_concurrency", max_concurrency)
        salt = f"open/{arrival}/{rate:g}/r{repeat}"
        # Multi-turn: sessions arrive on the schedule (rate is sessions per second), and each
        # later turn follows its previous answer.
        arrivals = workload.session(workload.requests - 1)[0] + 1
        offsets = arrival_offsets(arrivals, rate, arrival, f"{workload.seed}/{salt}/arrivals")
        warmup = workload.warmup_for(max_concurrency or DEFAULT_WARMUP_CAP)
        # Fully open: every request may be in flight at once, so the pool must not queue them.
        slots = max_concurrency or max(workload.requests, warmup)
        cap = max_concurrency
        if self._shard is not None and max_concurrency is not None:
            cap = slots = self._shard.slots

        async def measured(records: list[RequestRecord], state: _RunState, bodies: Bodies) -> None:
            # The shared schedule: each request (or session) keeps its own arrival offset.
            await self._open(workload, records, offsets, cap, state, bodies)

        return await self._run(
            workload,
            salt,
            warmup=warmup,
            warmup_concurrency=min(warmup, slots),
            connections=slots,
            measured=measured,
            mode="open",
            rate=float(rate),
            arrival=arrival,
            max_concurrency=max_concurrency,
            repeat=repeat,
        )

    async def sweep(
        self, workload: Workload, concurrencies: Sequence[int], *, repeat: int = 0
    ) -> list[LoadRun]:
        """Run ``workload`` closed-loop at each concurrency in turn, one run per level."""
        for level in concurrencies:
            _check_count("each concurrency", level)
        return [await self.closed_loop(workload, c, repeat=repeat) for c in concurrencies]

    # -- sync facade -----------------------------------------------------------------------

    def run_closed_loop(self, workload: Workload, concurrency: int, *, repeat: int = 0) -> LoadRun:
        """Blocking :meth:`closed_loop` (runs its own event loop, see :func:`run_blocking`).

        Several processes: :func:`pytest_sglang.loadgen.workers.sharded_closed_loop`.
        """
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

    # -- internals -------------------------------------------------------------------------

    def client(self, connections: int, *, reuse: bool = True) -> httpx.AsyncClient:
        """Return an httpx client on the aiohttp transport with a pool of ``connections``.

        ``reuse=False`` opens a fresh connection for every request and closes it after.
        """

        def session() -> aiohttp.ClientSession:
            # What AiohttpTransport builds from httpx.Limits, plus the send-time trace.
            connector = (
                aiohttp.TCPConnector(limit=connections, keepalive_timeout=5.0)
                if reuse
                else aiohttp.TCPConnector(limit=connections, force_close=True)
            )
            return aiohttp.ClientSession(connector=connector, trace_configs=[_wire_trace()])

        # trust_env=False: an HTTP(S)_PROXY in the environment would route a load test through
        # a proxy (on httpx's default transport, too), measuring the proxy.
        return httpx.AsyncClient(
            base_url=self.url,
            transport=AiohttpTransport(client=session),
            headers=self._headers,
            timeout=self._timeout,
            trust_env=False,
        )

    async def _run(
        self,
        workload: Workload,
        salt: str,
        *,
        warmup: int,
        warmup_concurrency: int,
        connections: int,
        measured: Callable[[list[RequestRecord], _RunState, Bodies], Awaitable[None]],
        mode: Literal["closed", "open"],
        concurrency: int | None = None,
        rate: float | None = None,
        arrival: str | None = None,
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> LoadRun:
        warm = _records(workload, warmup, warmup=True, salt=salt + "/warmup")
        main = _records(workload, workload.requests, warmup=False, salt=salt + "/measured")
        # Bodies are encoded before the run, so JSON encoding of long prompts is not on the
        # timed path between one request's end and the next one's send.
        warm_bodies = encoded_bodies(workload, salt + "/warmup", len(warm), model=self.model)
        main_bodies = encoded_bodies(workload, salt + "/measured", len(main), model=self.model)
        if self._shard is not None:  # this process sends its own requests only
            # A multi-turn session stays on one process: ownership goes by session.
            warm = [r for r in warm if self._shard.owns(workload.session(r.index)[0])]
            main = [r for r in main if self._shard.owns(workload.session(r.index)[0])]
        tally = Tally(len(warm) + len(main))
        timeouts = (self.stall_timeout, self.first_token_timeout)
        watchdog = StallWatchdog(*timeouts) if any(timeouts) else None
        state = _RunState(self, connections, tally, watchdog)
        started = time.perf_counter()
        client: ClientLoad | None = None
        ticker = ProgressTicker(self._progress, tally, started, self._progress_interval)
        ticker.start()
        watching = asyncio.create_task(watchdog.run()) if watchdog else None
        try:
            if self.flush_cache and (self._shard is None or self._shard.index == 0):
                await self._flush(state)
            if warm:
                await self._closed(workload, warm, warmup_concurrency, state, warm_bodies)
                if self.connections.closes_after_response is None and all(r.ok for r in warm):
                    await self._probe(workload, warm[-1], state, warm_bodies[warm[-1].index])
            if self._shard is not None:
                state.client()  # built now: the first measured request must not wait for it
                # Every process finished its warm-up: the measured requests start together.
                state.origin = await asyncio.to_thread(self._shard.sync)
            if state.aborted is None and self._before_measured is not None:
                await asyncio.to_thread(self._before_measured)
            if state.aborted is None:
                # The client's own load, over the measured requests only.
                monitor = ClientMonitor()
                monitor.start()
                try:
                    await measured(main, state, main_bodies)
                finally:
                    client = await monitor.stop()
        except BaseException:
            # A test timeout or Ctrl-C (raised here, or a cancellation when it struck the
            # event loop): keep what finished, for the report, and let it propagate.
            self.interrupted_run = LoadRun(
                workload=workload, mode=mode, started=started, concurrency=concurrency,
                records=tuple(r for r in warm + main if r.end is not None), rate=rate,
                arrival=arrival, max_concurrency=max_concurrency, repeat=repeat,
            )  # fmt: skip
            raise
        finally:
            await ticker.stop()
            if watching is not None:
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)
            await state.close()
        # Requests never sent have no record: a made-up failure would count against the
        # server as if it had been asked.
        sent = [r for r in warm + main if r.end is not None]
        run = LoadRun(
            workload=workload,
            mode=mode,
            records=tuple(sent),
            started=started,
            concurrency=concurrency,
            rate=rate,
            arrival=arrival,
            max_concurrency=max_concurrency,
            repeat=repeat,
            client=client,
        )
        if state.aborted is not None:
            unsent = len(warm) + len(main) - len(sent)
            raise ServerStoppedAnswering(
                f"{state.aborted}; the run was stopped with {unsent} of "
                f"{len(warm) + len(main)} requests not sent ({len(sent)} sent)",
                run,
                unsent,
            )
        return run

    async def _flush(self, state: _RunState) -> None:
        # ?timeout: SGLang 0.5.23 waits that long for running requests to finish first (as
        # bench_serving asks); older releases ignore it and refuse with 400 while busy.
        response = await state.client().post("/flush_cache", params={"timeout": 60})
        if response.status_code != 200:
            raise CacheFlushFailed(
                f"POST {self.url}/flush_cache answered {response.status_code}: "
                f"{response.text[:200]!r}; the server's prefix cache could not be emptied "
                "before the run (drop flush_cache, or let the server go idle first)"
            )

    async def _closed(
        self,
        workload: Workload,
        records: list[RequestRecord],
        concurrency: int,
        state: _RunState,
        bodies: Bodies,
    ) -> None:
        # A multi-turn session is one unit of work: its turns go one after another, each
        # once the previous answer is complete; without turns every request is its own.
        sessions: dict[int, list[RequestRecord]] = {}
        for record in records:
            sessions.setdefault(workload.session(record.index)[0], []).append(record)
        pending = iter(sessions.values())

        async def worker() -> None:
            # One shared iterator: each worker takes the next session as soon as its
            # previous one is done, which keeps exactly `concurrency` in flight.
            for session in pending:
                for record in session:
                    if state.aborted is not None:
                        return
                    await self._send(workload, record, bodies[record.index], state)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(sessions)))))

    async def _probe(
        self, workload: Workload, last: RequestRecord, state: _RunState, body: bytes
    ) -> None:
        """Learn the server's connection habit once its warm-up is over.

        A copy of the warm-up's last request (kept in no record, counted in no progress),
        sent at once on the pooled client as the first measured request would be: it either
        reuses a warm-up connection (the server keeps them), fails on one before any
        response byte and is sent again (``_attempts``), or gets a new one because the
        server had closed them all (both: the server closes after a response).
        """
        copy = RequestRecord(index=last.index, warmup=True, input_len=last.input_len,
                             output_len=last.output_len)  # fmt: skip
        tally, state.tally, state.probing = state.tally, Tally(1), True
        try:
            await self._send(workload, copy, body, state)
        finally:
            state.tally, state.probing = tally, False

    async def _open(
        self,
        workload: Workload,
        records: list[RequestRecord],
        offsets: list[float],
        max_concurrency: int | None,
        state: _RunState,
        bodies: Bodies,
    ) -> None:
        slots = asyncio.Semaphore(max_concurrency) if max_concurrency else None

        async def send(record: RequestRecord, body: bytes) -> None:
            if slots is None:
                await self._send(workload, record, body, state)
                return
            async with slots:
                if state.aborted is None:
                    await self._send(workload, record, body, state)

        async def session(turns: list[RequestRecord]) -> None:
            # A multi-turn session's turns, each once the previous answer is complete.
            for record in turns:
                if state.aborted is not None:
                    return
                await send(record, bodies[record.index])

        # Arrival units: a request, or a multi-turn session (its first turn is scheduled).
        units: dict[int, list[RequestRecord]] = {}
        for record in records:
            units.setdefault(workload.session(record.index)[0], []).append(record)
        tasks: list[asyncio.Task[None]] = []
        origin = time.perf_counter() if state.origin is None else state.origin
        for unit, turns in units.items():
            due = origin + offsets[unit]
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if state.aborted is not None:
                break
            turns[0].scheduled = due
            if len(turns) == 1:
                tasks.append(asyncio.create_task(send(turns[0], bodies[turns[0].index])))
            else:
                tasks.append(asyncio.create_task(session(turns)))
        await asyncio.gather(*tasks)

    async def _send(
        self,
        workload: Workload,
        record: RequestRecord,
        body: bytes,
        state: _RunState,
    ) -> None:
        tally, watchdog = state.tally, state.watchdog
        parser = stream_parser(workload.endpoint, record, tally) if workload.stream else None
        # Whether the request ended without an answer from the server (see _RunState.settle).
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
            _fail(record, _describe(exc))
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
        state: _RunState,
    ) -> None:
        """Send the request; once more on a fresh connection if a reused one was dead."""
        attempt = _Attempt(record)
        habits = self.connections
        try:
            await self._exchange(state.client(), workload, attempt, body, parser)
            if attempt.close:
                habits.closes("a response said Connection: close")
                state.stop_reuse()
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
                and _connection_lost(exc)
            ):
                raise
            first = _describe(exc)
            record.retries += 1
            habits.closes(f"a reused connection failed before any response byte: {first}")
            state.stale_connection()
            try:
                await self._exchange(state.client(fresh=True), workload, _Attempt(record), body,
                                     parser)  # fmt: skip
            except Exception as retry_exc:
                raise _RetryFailed(
                    f"{_describe(retry_exc)} (on a fresh connection, after the pooled one "
                    f"failed: {first})"
                ) from retry_exc

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        workload: Workload,
        attempt: _Attempt,
        body: bytes,
        parser: StreamParser | None,
    ) -> None:
        record = attempt.record
        # A retry starts the clocks again: the dead connection was the client's time.
        record.started = record.sent = time.perf_counter()
        # Seen by the trace signals in the tasks aiohttp starts from this one; the task sends
        # one request at a time, so the next attempt simply replaces it.
        _SENDING.set(attempt)
        async with client.stream("POST", PATHS[workload.endpoint], content=body) as response:
            record.status = response.status_code
            if response.headers.get("connection", "").lower() == "close":
                attempt.close = True
            if response.status_code >= 300:
                content = await response.aread()
                record.end = time.perf_counter()
                record.error = describe_http_error(response.status_code, content)
                return
            if parser is None:
                content = await response.aread()
                record.end = time.perf_counter()
                parse_body(workload.endpoint, record, content)
                return
            # The transport's byte stream itself, not aiter_raw(): that adds a generator
            # layer and a list per chunk for a chunker we do not use (the body is not
            # encoded: we ask for identity). Closing stays with `client.stream`.
            stream = response.stream
            assert isinstance(stream, httpx.AsyncByteStream)
            async for chunk in stream:
                parser.feed(chunk, time.perf_counter())
            now = time.perf_counter()
            parser.finish(now)
            record.end = parser.done_at if parser.done_at is not None else now


class _RunState:
    """What every request of one run shares: progress, watchdog, clients, failure streak."""

    def __init__(
        self,
        generator: LoadGenerator,
        connections: int,
        tally: Tally,
        watchdog: StallWatchdog | None,
    ) -> None:
        self.tally = tally
        self.watchdog = watchdog
        self._generator = generator
        self._connections = connections
        self._pooled: httpx.AsyncClient | None = None
        self._fresh: httpx.AsyncClient | None = None
        #: False once the server was seen closing connections: a fresh one per request.
        self.reuse = generator.connections.reuse
        #: The warm-up's probe is sending its second request (see ``LoadGenerator._probe``).
        self.probing = False
        #: Requests in a row that ended without an answer.
        self.streak = 0
        self._last_error: str | None = None
        #: Why the run stopped sending; ``None`` while it runs.
        self.aborted: str | None = None
        #: The deadlines of the requests in flight, by ``id`` of their records.
        self.inflight: dict[int, asyncio.Timeout] = {}
        #: Requests in flight when the run stopped, cut short then (``id`` of their records).
        self.cancelled: set[int] = set()
        #: A sharded run's common start of the measured phase (``perf_counter``).
        self.origin: float | None = None

    def client(self, *, fresh: bool = False) -> httpx.AsyncClient:
        """Return the pooled client, or the one that opens a fresh connection per request."""
        if fresh or not self.reuse or not self._generator.connections.reuse:
            if self._fresh is None:
                self._fresh = self._generator.client(self._connections, reuse=False)
            return self._fresh
        if self._pooled is None:
            self._pooled = self._generator.client(self._connections)
        return self._pooled

    def stale_connection(self) -> None:
        """Note a pooled connection the server had closed: reuse none from now on."""
        self.stop_reuse()

    def stop_reuse(self) -> None:
        """Send every later request of the run on a fresh connection."""
        self.reuse = False

    def settle(self, record: RequestRecord, unanswered: bool) -> None:
        """Count a finished request towards (or reset) the unanswered streak."""
        if not unanswered:
            self.streak = 0
            return
        self.streak += 1
        self._last_error = record.error
        limit = self._generator.max_consecutive_failures
        if limit is not None and self.streak >= limit and self.aborted is None:
            self.aborted = (
                f"the server stopped answering: {self.streak} consecutive transport "
                f"failures/timeouts (max_consecutive_failures={limit}; last: "
                f"{self._last_error})"
            )
            # The requests still in flight wait on the same silent server: end them now
            # rather than after their own timeouts (they were sent: their records stay).
            loop = asyncio.get_running_loop()
            for key, deadline in self.inflight.items():
                # A deadline the watchdog expired in the same tick is ending already (and
                # cannot be rescheduled): its own message stands.
                if key != id(record) and not deadline.expired():
                    self.cancelled.add(key)
                    deadline.reschedule(loop.time())

    async def close(self) -> None:
        """Close the run's clients."""
        for client in (self._pooled, self._fresh):
            if client is not None:
                await client.aclose()


class _RetryFailed(Exception):
    """The retry on a fresh connection failed too; the message names both failures."""


def _records(workload: Workload, count: int, *, warmup: bool, salt: str) -> list[RequestRecord]:
    # Each record keeps its own requested lengths (a length distribution draws them).
    records = []
    for i in range(count):
        input_len, output_len = workload.lengths(salt, i)
        records.append(
            RequestRecord(index=i, warmup=warmup, input_len=input_len, output_len=output_len)
        )
    return records


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _fail(record: RequestRecord, message: str) -> None:
    if record.error is None:
        record.error = message


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection was lost (not a timeout, not a protocol error)."""
    cause = exc.__cause__ or exc
    if isinstance(cause, aiohttp.ClientConnectorError):
        return False  # could not connect at all: not a stale pooled connection
    return isinstance(
        cause, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError | ConnectionError
    )


def _describe(exc: BaseException) -> str:
    """Name a transport failure by its real cause, then quote the exception chain.

    httpx-aiohttp maps aiohttp's exceptions onto httpx's loosely (a dropped connection
    becomes ``ConnectTimeout``): the kind is read from the original exception.
    """
    if isinstance(exc, _RetryFailed):
        return str(exc)
    cause = exc.__cause__
    root = cause if cause is not None else exc
    detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if cause is not None and str(cause) != str(exc):
        detail += f" (from {type(cause).__name__}: {cause})"
    elif cause is not None:
        detail += f" (from {type(cause).__name__})"
    return f"{_transport_kind(root)}: {detail}"


def _transport_kind(exc: BaseException) -> str:
    os_error = getattr(exc, "os_error", None)  # aiohttp.ClientConnectorError
    errors = [exc, os_error, exc.__cause__, exc.__context__]
    if any(isinstance(e, ConnectionRefusedError) for e in errors):
        return "connection refused"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "cannot connect"
    if any(isinstance(e, ConnectionResetError) for e in errors) or (
        isinstance(exc, OSError) and exc.errno == errno.ECONNRESET
    ):
        return "connection reset"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server closed the connection"
    if isinstance(exc, aiohttp.ClientPayloadError):
        return "response cut"
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError | httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, aiohttp.ClientOSError | ConnectionError):
        return "connection lost"
    return "transport error"
