"""One request on the wire: the HTTP client, the send-time stamp, and transport failures named.

httpx's API on the ``httpx-aiohttp`` transport, the cheaper per streamed token
(``docs/metrics.md``, "Client cost"). A record's ``sent`` is when aiohttp hands the
request's bytes to the socket (its ``on_request_chunk_sent`` trace signal), so the client's
own send path is not counted as the server's time.
"""

from __future__ import annotations

import contextvars
import errno
import time
from collections.abc import Awaitable, Callable, Mapping
from types import SimpleNamespace

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport

from pytest_sglang.loadgen.prompts import PATHS
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser, describe_http_error, parse_body
from pytest_sglang.loadgen.workload import Endpoint

__all__ = ["Attempt", "RetryFailed", "connection_lost", "describe", "exchange", "http_client"]


class Attempt:
    """One attempt to send a request: its record, and what the connection pool did for it."""

    __slots__ = ("close", "created", "record", "reused")

    def __init__(self, record: RequestRecord) -> None:
        self.record = record
        #: The pool handed it a connection an earlier request used.
        self.reused = False
        #: The pool opened a new connection for it.
        self.created = False
        #: The response said ``Connection: close``.
        self.close = False


#: The attempt the current task is sending. aiohttp writes a request's body in a task it
#: creates from the sending task, so the trace signals below see it too.
_SENDING: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
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


def _marker(flag: str) -> Callable[..., Awaitable[None]]:
    """Return a trace signal handler that sets ``flag`` on the attempt being sent."""

    async def mark(
        session: aiohttp.ClientSession, context: SimpleNamespace, params: object
    ) -> None:
        attempt = _SENDING.get()
        if attempt is not None:
            setattr(attempt, flag, True)

    return mark


def _wire_trace() -> aiohttp.TraceConfig:
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_stamp_bytes_written)
    trace.on_connection_reuseconn.append(_marker("reused"))
    trace.on_connection_create_end.append(_marker("created"))
    return trace


def http_client(
    url: str,
    headers: Mapping[str, str],
    timeout: httpx.Timeout,
    connections: int,
    *,
    reuse: bool = True,
) -> httpx.AsyncClient:
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
        base_url=url,
        transport=AiohttpTransport(client=session),
        headers=dict(headers),
        timeout=timeout,
        trust_env=False,
    )


async def exchange(
    client: httpx.AsyncClient,
    endpoint: Endpoint,
    attempt: Attempt,
    body: bytes,
    parser: StreamParser | None,
) -> None:
    """Send one request and fill its record from the response (raises transport failures)."""
    record = attempt.record
    # A retry starts the clocks again: the dead connection was the client's time.
    record.started = record.sent = time.perf_counter()
    # Seen by the trace signals in the tasks aiohttp starts from this one; the task sends
    # one request at a time, so the next attempt simply replaces it.
    _SENDING.set(attempt)
    async with client.stream("POST", PATHS[endpoint], content=body) as response:
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
            parse_body(endpoint, record, content)
            return
        # The transport's byte stream itself, not aiter_raw(): that adds a generator layer
        # and a list per chunk for a chunker we do not use (the body is not encoded: we ask
        # for identity). Closing stays with `client.stream`.
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        async for chunk in stream:
            parser.feed(chunk, time.perf_counter())
        now = time.perf_counter()
        parser.finish(now)
        record.end = parser.done_at if parser.done_at is not None else now


class RetryFailed(Exception):
    """The retry on a fresh connection failed too; the message names both failures."""


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says the connection was lost (not a timeout, not a protocol error)."""
    cause = exc.__cause__ or exc
    if isinstance(cause, aiohttp.ClientConnectorError):
        return False  # could not connect at all: not a stale pooled connection
    return isinstance(
        cause, aiohttp.ServerDisconnectedError | aiohttp.ClientOSError | ConnectionError
    )


def describe(exc: BaseException) -> str:
    """Name a transport failure by its real cause, then quote the exception chain.

    httpx-aiohttp maps aiohttp's exceptions onto httpx's loosely (a dropped connection
    becomes ``ConnectTimeout``): the kind is read from the original exception.
    """
    if isinstance(exc, RetryFailed):
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
