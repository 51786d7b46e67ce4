"""Ground truth for measurement checks: when each request arrived and each chunk left.

``--emulator-trace PATH`` (batch engine) writes JSON lines:

- first a clock line, ``{"clock": {"wall": W, "monotonic": M, "pid": P}}``: ``time.time()`` and
  ``time.monotonic()`` read together at start-up. Every time below is wall-clock
  (``time.time()``) seconds, derived from the monotonic clock as ``t - M + W``, so a client in
  another process can compare with its own ``time.time()``; on Linux ``time.monotonic()`` and
  ``time.perf_counter()`` read the same system-wide clock, so a client on the same host can
  convert back exactly: ``perf = wall - W + M``.
- one line per finished (or abandoned) generation, written when it ends::

      {"rid": "...", "arrived": ta, "http_received": t0, "received": t1, "prompt_tokens": 32,
       "completion_tokens": 256, "finish": "length", "verify_ct": 0,
       "t": [t2, ...], "n": [1, ...], "first_write": t3, "peer": ["127.0.0.1", 53312]}

  - ``arrived``: the request's first bytes reached the server: the kernel's receive time of
    that segment (``arrivals``; Linux), before the event loop read it. ``null`` where the
    kernel cannot stamp segments;
  - ``http_received``: the HTTP layer got the request (uvicorn parsed its head and called the
    application; ``TraceMiddleware``), the earliest moment the application can observe;
  - ``received``: the request reached the engine (body read and parsed, request built);
  - ``t[i]``: the engine emitted chunk ``i`` (``n[i]`` tokens), i.e. the forward producing it
    ended; ``first_write``: the HTTP layer finished writing the response's first body chunk
    to the socket (for a stream, the first tokens' event); ``peer``: the client's address and
    port, so a client on the same host can match its own requests exactly.
  ``arrived``, ``http_received``, ``first_write`` and ``peer`` are ``null`` for generations
  that did not come over HTTP (health probes); ``finish`` is ``null`` when the client went
  away first.
- at shutdown, a summary line ``{"summary": {...}}`` with the engine's own figures (forwards,
  model and wall time, how far it fell behind the model's schedule).

Lines are buffered and written at most every ``FLUSH_INTERVAL`` seconds and at close: the
trace costs one list append per chunk and one ``json.dumps`` per request.
"""

from __future__ import annotations

import contextvars
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pytest_sglang.emulator.engine.arrivals import Arrivals

__all__ = ["TraceMiddleware", "TraceRecord", "TraceWriter", "read_trace"]

FLUSH_INTERVAL = 0.5
GENERATION_PATHS = frozenset({"/generate", "/v1/completions", "/v1/chat/completions"})


@dataclass
class TraceRecord:
    """One generation's timeline, in ``time.monotonic()`` seconds."""

    rid: str
    received: float
    prompt_tokens: int
    completion_tokens: int = 0
    finish: str | None = None
    verify_ct: int = 0
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    arrived: float | None = None
    http_received: float | None = None
    first_write: float | None = None
    peer: list[Any] | None = None


@dataclass
class _HttpStamp:
    """What the middleware knows of one HTTP request; the engine adds its generations."""

    arrived: float | None
    received: float
    peer: list[Any] | None = None
    records: list[TraceRecord] = field(default_factory=list)
    #: The response ended: later generations (a client gone away) are written directly.
    closed: bool = False


_CURRENT: contextvars.ContextVar[_HttpStamp | None] = contextvars.ContextVar(
    "emulator_trace_http", default=None
)


class TraceWriter:
    """Appends trace lines to a JSON-lines file; times are converted to wall-clock seconds."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = path.open("w", encoding="utf-8")
        #: Kernel receive times of requests, filled by the socket uvicorn serves on.
        self.arrivals = Arrivals()
        wall, mono = time.time(), time.monotonic()
        #: Add to a ``time.monotonic()`` reading to get wall-clock seconds.
        self.offset = wall - mono
        self._buffer: list[str] = []
        self._last_flush = mono
        self._write({"clock": {"wall": wall, "monotonic": mono, "pid": os.getpid()}})
        self.flush()

    def finished(self, record: TraceRecord) -> None:
        """Record a generation that ended; an HTTP request's are written when it ends."""
        stamp = _CURRENT.get()
        if stamp is not None and not stamp.closed:
            stamp.records.append(record)
        else:
            self.write(record)

    def write(self, record: TraceRecord) -> None:
        """Write one generation's line."""
        offset = self.offset

        def wall(value: float | None) -> float | None:
            return None if value is None else round(value + offset, 6)

        self._write(
            {
                "rid": record.rid,
                "arrived": wall(record.arrived),
                "http_received": wall(record.http_received),
                "received": wall(record.received),
                "prompt_tokens": record.prompt_tokens,
                "completion_tokens": record.completion_tokens,
                "finish": record.finish,
                "verify_ct": record.verify_ct,
                "t": [round(t + offset, 6) for t in record.times],
                "n": list(record.counts),
                "first_write": wall(record.first_write),
                "peer": record.peer,
            }
        )
        if time.monotonic() - self._last_flush >= FLUSH_INTERVAL:
            self.flush()

    def summary(self, figures: Mapping[str, Any]) -> None:
        """Record the engine's summary figures."""
        self._write({"summary": dict(figures)})

    def flush(self) -> None:
        """Write buffered lines to the file."""
        if self._buffer:
            self._file.write("".join(self._buffer))
            self._buffer.clear()
        self._file.flush()
        self._last_flush = time.monotonic()

    def close(self) -> None:
        """Flush and close the file."""
        if not self._file.closed:
            self.flush()
            self._file.close()

    def _write(self, obj: Mapping[str, Any]) -> None:
        self._buffer.append(json.dumps(obj, separators=(",", ":")) + "\n")


class TraceMiddleware:
    """Stamps generation requests at the HTTP layer: arrival and first body write.

    Added by ``app.build_app`` only when a trace is written. The stamp travels to the engine
    in a context variable (Starlette runs the route, and the streamed body, in tasks that
    inherit this context); the generations' lines are written when the response ends.
    """

    def __init__(self, app: ASGIApp, writer: TraceWriter) -> None:
        self.app = app
        self.writer = writer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request through, stamped."""
        received = time.monotonic()
        client = scope.get("client")
        # Taken for every request, so that no arrival is left over for a later one.
        arrived = self.writer.arrivals.take(None if client is None else tuple(client))
        if scope["type"] != "http" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        stamp = _HttpStamp(arrived, received, None if client is None else list(client))
        first_write: float | None = None

        async def stamped_send(message: Message) -> None:
            nonlocal first_write
            await send(message)
            if first_write is None and message["type"] == "http.response.body":
                if message.get("body"):
                    first_write = time.monotonic()

        token = _CURRENT.set(stamp)
        try:
            await self.app(scope, receive, stamped_send)
        finally:
            _CURRENT.reset(token)
            stamp.closed = True
            for record in stamp.records:
                record.arrived = stamp.arrived
                record.http_received = stamp.received
                record.first_write = first_write
                record.peer = stamp.peer
                self.writer.write(record)


def read_trace(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """Read a trace: the clock line, the request lines and the summary (``None`` if absent)."""
    clock: dict[str, Any] = {}
    requests: list[dict[str, Any]] = []
    summary: dict[str, Any] | None = None
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if not line.strip():
                continue
            obj = json.loads(line)
            if "clock" in obj:
                clock = obj["clock"]
            elif "summary" in obj:
                summary = obj["summary"]
            else:
                requests.append(obj)
    return clock, requests, summary
