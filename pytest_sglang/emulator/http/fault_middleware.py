"""Generation faults at the HTTP level: ``error-rate``, ``stall-stream``, ``crash-under-load``.

They are registered in ``faults``. An ASGI middleware around the routes, added by
``app.build_app`` only when one of these faults is on (otherwise the request path is
untouched). It looks at generation requests only
(``POST``/``PUT /generate``, ``POST /v1/completions``, ``POST /v1/chat/completions``) and only
once the server is up, so the warm-up request and health probes are never hit:

- ``error-rate=P``: each request, with probability P (a generator seeded by
  ``--emulator-seed``, drawn in arrival order), answers HTTP 500 at once with SGLang's error
  body for the endpoint: native ``{"error": {"message": ...}}``, OpenAI
  ``{"object": "error", "message", "type": "InternalServerError", "param": null, "code": 500}``.
- ``stall-stream=N``: every streamed response stops after its N-th event (``data:`` chunk) and
  never finishes: no more bytes, no ``[DONE]``, the connection stays open until the client
  gives up. The engine still finishes the request (the stall is in the HTTP layer).
- ``crash-under-load=N``: when the N-th generation request arrives, the process logs a
  scheduler crash and dies by SIGKILL (exit status -9), as SGLang does when its scheduler
  process fails under load; every request in flight loses its connection.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pytest_sglang.emulator.http.web import native_error, openai_error
from pytest_sglang.emulator.runtime import logs
from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.signals import kill_self
from pytest_sglang.emulator.runtime.state import ServerStatus

__all__ = ["FAULTS", "GenerationFaults", "active"]

FAULTS = ("error-rate", "stall-stream", "crash-under-load")
GENERATION_PATHS = frozenset({"/generate", "/v1/completions", "/v1/chat/completions"})
ERROR_MESSAGE = (
    "Internal server error: the request failed in the scheduler (emulated fault error-rate)."
)
CRASH_LINES = (
    "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "sglang/srt/managers/scheduler.py", line 3021, in run_scheduler_process\n'
    "    scheduler.event_loop_overlap()\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered "
    "(emulated fault crash-under-load)",
    "Received sigquit from a child process. It usually means the child failed.",
)


def active(ctx: EmulatorContext) -> bool:
    """Whether any fault of this module is on."""
    return any(name in ctx.faults for name in FAULTS)


class _Stalled(Exception):
    """A stalled stream whose client went away: ends the request quietly."""


class GenerationFaults:
    """The ASGI middleware; see the module docstring."""

    def __init__(self, app: ASGIApp, ctx: EmulatorContext) -> None:
        self.app = app
        self.ctx = ctx
        faults = ctx.faults
        self.error_rate = (
            float(faults.value("error-rate") or 0.0) if "error-rate" in faults else 0.0
        )
        self.stall_after = (
            int(faults.value("stall-stream") or 1) if "stall-stream" in faults else None
        )
        self.crash_after = (
            int(faults.value("crash-under-load") or 1) if "crash-under-load" in faults else None
        )
        self._rng = random.Random(f"{ctx.options.perf.seed}/error-rate")
        #: Generation requests seen since the server came up.
        self.started = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass everything through, except generation requests the faults strike."""
        if (
            scope["type"] != "http"
            or scope["path"] not in GENERATION_PATHS
            or scope["method"] not in ("POST", "PUT")
            or self.ctx.state.status is not ServerStatus.UP
        ):
            await self.app(scope, receive, send)
            return
        self.started += 1
        if self.crash_after is not None and self.started >= self.crash_after:
            asyncio.get_running_loop().call_soon(self._crash)
        if self.error_rate > 0.0 and self._rng.random() < self.error_rate:
            await self._error(scope, receive, send)
            return
        if self.stall_after is None:
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, _StallingSend(send, receive, self.stall_after))
        except _Stalled:
            pass

    async def _error(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["path"] == "/generate":
            response = native_error(ERROR_MESSAGE, 500)
        else:
            response = openai_error(ERROR_MESSAGE, err_type="InternalServerError", code=500)
        await response(scope, receive, send)

    def _crash(self) -> None:
        for line in CRASH_LINES:
            self.ctx.log.error(line)
        logs.flush()
        kill_self()


class _StallingSend:
    """An ASGI ``send`` that passes ``limit`` body events of a stream, then hangs."""

    def __init__(self, send: Send, receive: Receive, limit: int) -> None:
        self._send = send
        self._receive = receive
        self._limit = limit
        self._events = 0
        self._streaming = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self._streaming = _is_event_stream(message.get("headers", []))
        elif message["type"] == "http.response.body" and self._streaming and message.get("body"):
            if self._events >= self._limit:
                await self._hang()
            self._events += 1
        await self._send(message)

    async def _hang(self) -> None:
        # Nothing more is sent; wait for the client to go away, then end the request.
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                raise _Stalled


def _is_event_stream(headers: Any) -> bool:
    for key, value in headers:
        if bytes(key).lower() == b"content-type":
            return bytes(value).startswith(b"text/event-stream")
    return False
