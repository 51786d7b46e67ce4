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
there), and a stream by ``stall_timeout`` seconds without a new token once its first token
has arrived (:mod:`~pytest_sglang.loadgen.watchdog`; the wait for the first token may be a
queue, so only ``request_timeout`` bounds it).

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
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, TypeVar

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from pytest_sglang.config.defaults import DEFAULT_REQUEST_TIMEOUT, DEFAULT_STALL_TIMEOUT
from pytest_sglang.loadgen.progress import ProgressCallback, ProgressTicker, Tally, no_progress
from pytest_sglang.loadgen.prompts import PATHS, encoded_bodies
from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import Arrival, arrival_offsets, check_arrival
from pytest_sglang.loadgen.streams import (
    StreamParser,
    describe_http_error,
    parse_body,
    stream_parser,
)
from pytest_sglang.loadgen.watchdog import StallWatchdog
from pytest_sglang.loadgen.workload import DEFAULT_WARMUP_CAP, Workload

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "DEFAULT_STALL_TIMEOUT", "LoadGenerator", "run_blocking"]

T = TypeVar("T")

#: Encoded request bodies of one phase, by request index.
Bodies = list[bytes]


#: The record of the request the current task is sending. aiohttp writes a request's body
#: in a task it creates from the sending task, so the trace signal below sees it too.
_SENDING: contextvars.ContextVar[RequestRecord | None] = contextvars.ContextVar(
    "pytest_sglang_sending", default=None
)


async def _stamp_bytes_written(
    session: aiohttp.ClientSession, context: SimpleNamespace, params: object
) -> None:
    """Stamp the request's send time: aiohttp is about to write its body to the socket."""
    record = _SENDING.get()
    # The first body chunk only (the head goes out with it): later chunks of a long body
    # must not move the start of the clock.
    if record is not None and record.sent == record.started:
        record.sent = time.perf_counter()


def _wire_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_stamp_bytes_written)
    return trace


class LoadGenerator:
    """Runs workloads against one server and returns a :class:`LoadRun` per load level.

    :param url: the server's base URL, e.g. ``http://127.0.0.1:30000``.
    :param api_key: sent as ``Authorization: Bearer <key>`` when set.
    :param headers: extra headers for every request.
    :param model: the OpenAI ``model`` field (SGLang echoes it; the served name is polite).
    :param request_timeout: seconds a request may take in all before it is recorded as failed.
    :param stall_timeout: seconds a stream may go without a new token, once its first token
        arrived, before the request is recorded as failed (stalled); ``None`` leaves only
        ``request_timeout``.
    :param connect_timeout: seconds to open a connection.
    :param progress: called with ``(done, total, output_tokens, elapsed)`` at most every
        ``progress_interval`` seconds during a run, and once at its end.
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
        connect_timeout: float = 30.0,
        progress: ProgressCallback = no_progress,
        progress_interval: float = 1.0,
    ) -> None:
        for name, value in (
            ("request_timeout", request_timeout),
            ("stall_timeout", stall_timeout),
            ("connect_timeout", connect_timeout),
            ("progress_interval", progress_interval),
        ):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
        self.url = url.rstrip("/")
        self.model = model
        self.request_timeout = float(request_timeout)
        self.stall_timeout = None if stall_timeout is None else float(stall_timeout)
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

        async def measured(
            client: httpx.AsyncClient,
            records: list[RequestRecord],
            state: _RunState,
            bodies: Bodies,
        ) -> None:
            await self._closed(client, workload, records, concurrency, state, bodies)

        return await self._run(
            workload,
            f"closed/c{concurrency}/r{repeat}",
            warmup=warmup,
            warmup_concurrency=min(warmup, concurrency),
            connections=concurrency,
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
        the loop fully open.
        """
        check_arrival(rate, arrival)
        if max_concurrency is not None:
            _check_count("max_concurrency", max_concurrency)
        salt = f"open/{arrival}/{rate:g}/r{repeat}"
        offsets = arrival_offsets(
            workload.requests, rate, arrival, f"{workload.seed}/{salt}/arrivals"
        )
        warmup = workload.warmup_for(max_concurrency or DEFAULT_WARMUP_CAP)
        # Fully open: every request may be in flight at once, so the pool must not queue them.
        slots = max_concurrency or max(workload.requests, warmup)

        async def measured(
            client: httpx.AsyncClient,
            records: list[RequestRecord],
            state: _RunState,
            bodies: Bodies,
        ) -> None:
            await self._open(client, workload, records, offsets, max_concurrency, state, bodies)

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

    # -- internals -------------------------------------------------------------------------

    def client(self, connections: int) -> httpx.AsyncClient:
        """Return an httpx client on the aiohttp transport with a pool of ``connections``."""

        def session() -> aiohttp.ClientSession:
            # What AiohttpTransport builds from httpx.Limits, plus the send-time trace.
            connector = aiohttp.TCPConnector(limit=connections, keepalive_timeout=5.0)
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
        measured: Callable[
            [httpx.AsyncClient, list[RequestRecord], _RunState, Bodies], Awaitable[None]
        ],
        mode: Literal["closed", "open"],
        concurrency: int | None = None,
        rate: float | None = None,
        arrival: str | None = None,
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> LoadRun:
        warm = _records(workload, warmup, warmup=True)
        main = _records(workload, workload.requests, warmup=False)
        # Bodies are encoded before the run, so JSON encoding of long prompts is not on the
        # timed path between one request's end and the next one's send.
        warm_bodies = encoded_bodies(workload, salt + "/warmup", len(warm), model=self.model)
        main_bodies = encoded_bodies(workload, salt + "/measured", len(main), model=self.model)
        tally = Tally(len(warm) + len(main))
        watchdog = StallWatchdog(self.stall_timeout) if self.stall_timeout else None
        state = _RunState(tally, watchdog)
        started = time.perf_counter()
        ticker = ProgressTicker(self._progress, tally, started, self._progress_interval)
        ticker.start()
        watching = asyncio.create_task(watchdog.run()) if watchdog else None
        try:
            async with self.client(connections) as client:
                if warm:
                    await self._closed(
                        client, workload, warm, warmup_concurrency, state, warm_bodies
                    )
                await measured(client, main, state, main_bodies)
        finally:
            await ticker.stop()
            if watching is not None:
                watching.cancel()
                await asyncio.gather(watching, return_exceptions=True)
        return LoadRun(
            workload=workload,
            mode=mode,
            records=tuple(warm + main),
            started=started,
            concurrency=concurrency,
            rate=rate,
            arrival=arrival,
            max_concurrency=max_concurrency,
            repeat=repeat,
        )

    async def _closed(
        self,
        client: httpx.AsyncClient,
        workload: Workload,
        records: list[RequestRecord],
        concurrency: int,
        state: _RunState,
        bodies: Bodies,
    ) -> None:
        pending = iter(records)

        async def worker() -> None:
            # One shared iterator: each worker takes the next request as soon as its
            # previous one is done, which keeps exactly `concurrency` in flight.
            for record in pending:
                await self._send(client, workload, record, bodies[record.index], state)

        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(records)))))

    async def _open(
        self,
        client: httpx.AsyncClient,
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
                await self._send(client, workload, record, body, state)
                return
            async with slots:
                await self._send(client, workload, record, body, state)

        tasks: list[asyncio.Task[None]] = []
        origin = time.perf_counter()
        for record, offset in zip(records, offsets, strict=True):
            due = origin + offset
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            record.scheduled = due
            tasks.append(asyncio.create_task(send(record, bodies[record.index])))
        await asyncio.gather(*tasks)

    async def _send(
        self,
        client: httpx.AsyncClient,
        workload: Workload,
        record: RequestRecord,
        body: bytes,
        state: _RunState,
    ) -> None:
        tally, watchdog = state.tally, state.watchdog
        parser = stream_parser(workload.endpoint, record, tally) if workload.stream else None
        try:
            async with asyncio.timeout(self.request_timeout) as deadline:
                if watchdog is not None and parser is not None:
                    watchdog.watch(record, deadline)
                await self._exchange(client, workload, record, body, parser)
        except TimeoutError:
            if watchdog is not None and watchdog.stalled(record):
                _fail(
                    record,
                    f"stalled: no new token for {watchdog.stall_timeout:g} s after "
                    f"{len(record.chunk_times)} token chunks (stall_timeout; "
                    "--sglang-stall-timeout under pytest)",
                )
            else:
                _fail(
                    record,
                    f"timed out: no complete response within {self.request_timeout:g} s "
                    f"(request_timeout; --sglang-request-timeout under pytest); "
                    f"{len(record.chunk_times)} token chunks had arrived",
                )
        except Exception as exc:  # recorded, never raised: the run keeps every request
            _fail(record, _describe(exc))
        finally:
            if watchdog is not None:
                watchdog.forget(record)
            if record.end is None:
                record.end = time.perf_counter()
            if parser is None and record.ok:
                tally.tokens += record.output_tokens or 0  # streams count as chunks arrive
            tally.done += 1

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        workload: Workload,
        record: RequestRecord,
        body: bytes,
        parser: StreamParser | None,
    ) -> None:
        record.started = record.sent = time.perf_counter()
        # Seen by `_stamp_bytes_written` in the body-writing task aiohttp starts from this one;
        # the task sends one request at a time, so the next request simply replaces it.
        _SENDING.set(record)
        async with client.stream("POST", PATHS[workload.endpoint], content=body) as response:
            record.status = response.status_code
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


def run_blocking(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` to completion on a new event loop and return its result.

    From a thread that is already running an event loop (an ``async def`` test under
    pytest-asyncio or anyio calling ``sglang_bench``) :func:`asyncio.run` refuses: the
    coroutine then runs on its own loop in a worker thread while the caller waits. The
    caller's loop is blocked meanwhile, as by any blocking call; await the async API
    (:meth:`LoadGenerator.closed_loop`...) to keep it running.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1, thread_name_prefix="pytest-sglang-loadgen") as worker:
        return worker.submit(asyncio.run, coroutine).result()


@dataclass(frozen=True)
class _RunState:
    """What every request of one run shares: the progress counts and the stall watchdog."""

    tally: Tally
    watchdog: StallWatchdog | None


def _records(workload: Workload, count: int, *, warmup: bool) -> list[RequestRecord]:
    return [
        RequestRecord(
            index=i, warmup=warmup, input_len=workload.input_len, output_len=workload.output_len
        )
        for i in range(count)
    ]


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def _fail(record: RequestRecord, message: str) -> None:
    if record.error is None:
        record.error = message


def _describe(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    cause = exc.__cause__
    # httpx-aiohttp maps aiohttp's exceptions onto httpx's, sometimes loosely (a dropped
    # connection becomes ConnectTimeout): the original says what really happened.
    if cause is not None and str(cause) != str(exc):
        text += f" (from {type(cause).__name__}: {cause})"
    elif cause is not None:
        text += f" (from {type(cause).__name__})"
    return text
