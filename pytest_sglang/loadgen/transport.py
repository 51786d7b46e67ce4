"""One request on the wire: the pool's trace, the send-time stamp, transport failures named.

A record's ``sent`` is when aiohttp hands the request's bytes to the socket (its
``on_request_chunk_sent`` trace signal), so the client's own send path is not counted as the
server's time.
"""

from __future__ import annotations

import contextvars
import errno
import time
from dataclasses import dataclass
from types import SimpleNamespace

import aiohttp
import httpx

from pytest_sglang.loadgen.prompts import PATHS
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser, describe_http_error
from pytest_sglang.loadgen.workload import Endpoint

__all__ = ["Attempt", "RetryFailed", "describe", "exchange", "trace"]


@dataclass(slots=True)
class Attempt:
    """One attempt to send a request: its record, and what the connection pool did for it."""

    record: RequestRecord
    reused: bool = False  # the pool handed it a connection an earlier request used
    created: bool = False  # the pool opened a new connection for it
    close: bool = False  # the response said ``Connection: close``


class RetryFailed(Exception):
    """The retry on a fresh connection failed too; the message names both failures."""


#: The attempt the current task is sending. aiohttp writes a request's body in a task it
#: creates from the sending task, so the trace signals below see it too.
_SENDING: contextvars.ContextVar[Attempt | None] = contextvars.ContextVar(
    "pytest_sglang_sending", default=None
)


async def _trace(session: aiohttp.ClientSession, context: SimpleNamespace, params: object) -> None:
    """Note what the pool did for the attempt being sent, and stamp its send time."""
    attempt = _SENDING.get()
    if attempt is None:
        return
    if isinstance(params, aiohttp.TraceConnectionReuseconnParams):
        attempt.reused = True
    elif isinstance(params, aiohttp.TraceConnectionCreateEndParams):
        attempt.created = True
    elif attempt.record.sent == attempt.record.started:
        # The first body chunk only (the head goes out with it): later chunks of a long
        # body must not move the start of the clock.
        attempt.record.sent = time.perf_counter()


def trace() -> aiohttp.TraceConfig:
    """Return the trace that notes what the pool did for each attempt and its send time."""
    config = aiohttp.TraceConfig()
    config.on_request_chunk_sent.append(_trace)
    config.on_connection_reuseconn.append(_trace)
    config.on_connection_create_end.append(_trace)
    return config


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
    # Seen by the trace in the tasks aiohttp starts from this one; the task sends one
    # request at a time, so the next attempt simply replaces it.
    _SENDING.set(attempt)
    async with client.stream("POST", PATHS[endpoint], content=body) as response:
        record.status = response.status_code
        attempt.close = response.headers.get("connection", "").lower() == "close"
        if response.status_code >= 300 or parser is None:
            content = await response.aread()
            record.end = time.perf_counter()
            if response.status_code >= 300:
                record.error = describe_http_error(response.status_code, content)
            else:
                StreamParser(endpoint, record).whole(content)
            return
        # The transport's byte stream itself, not aiter_raw(): that adds a generator layer
        # and a list per chunk for a chunker we do not use (we ask for identity).
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        async for chunk in stream:
            parser.feed(chunk, time.perf_counter())
        now = time.perf_counter()
        parser.finish(now)
        record.end = parser.done_at if parser.done_at is not None else now


def describe(exc: BaseException) -> str:
    """Name a transport failure by its real cause (``kind: detail``), quoting the chain.

    httpx-aiohttp maps aiohttp's exceptions onto httpx's loosely (a dropped connection
    becomes ``ConnectTimeout``): the kind is read from the original exception.
    """
    if isinstance(exc, RetryFailed):
        return str(exc)
    cause = exc.__cause__
    detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
    if cause is not None:
        quoted = f": {cause}" if str(cause) != str(exc) else ""
        detail += f" (from {type(cause).__name__}{quoted})"
    root = exc if cause is None else cause
    errors = [root, getattr(root, "os_error", None), root.__cause__, root.__context__]
    if any(isinstance(e, ConnectionRefusedError) for e in errors):
        kind = "connection refused"
    elif isinstance(root, aiohttp.ClientConnectorError):
        kind = "cannot connect"
    elif any(isinstance(e, ConnectionResetError) for e in errors) or (
        isinstance(root, OSError) and root.errno == errno.ECONNRESET
    ):
        kind = "connection reset"
    elif isinstance(root, aiohttp.ServerDisconnectedError):
        kind = "server closed the connection"
    elif isinstance(root, aiohttp.ClientPayloadError):
        kind = "response cut"
    elif isinstance(root, TimeoutError | aiohttp.ServerTimeoutError | httpx.TimeoutException):
        kind = "timed out"
    elif isinstance(root, aiohttp.ClientOSError | ConnectionError):
        kind = "connection lost"
    else:
        kind = "transport error"
    return f"{kind}: {detail}"
