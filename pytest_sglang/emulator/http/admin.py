"""``/flush_cache`` (GET or POST, optional ``?timeout=`` seconds in 0.5.23).

SGLang answers with a plain ``Response`` that sets no content type (the real 0.5.23 server
sends no ``Content-Type`` header at all), so neither does the emulator.
"""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pytest_sglang.emulator.runtime.context import EmulatorContext

FLUSHED = (
    "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
    "waiting requests, the operation will not be performed.)\n"
)
NOT_FLUSHED_NEW = "Cache not flushed: there are running or waiting requests.\n"


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """Return the cache-flush route."""

    async def flush_cache(request: Request) -> Response:
        sched = ctx.stats.scheduler
        timeout = 0.0
        if ctx.is_new:
            try:
                timeout = float(request.query_params.get("timeout", 0) or 0)
            except ValueError:
                timeout = 0.0
        deadline = time.monotonic() + timeout
        # With a timeout, wait for the server to go idle first (bench_serving sends 60). A poll:
        # the engine interface has no idle event, and this admin call is rare.
        while sched.num_running + sched.num_queued > 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if sched.num_running + sched.num_queued > 0:
            return _untyped(NOT_FLUSHED_NEW if ctx.is_new else FLUSHED, 400)
        if ctx.prefix_cache is not None:
            ctx.prefix_cache.clear()
        ctx.log.info("Cache flushed successfully!")
        return _untyped(FLUSHED, 200)

    return [Route("/flush_cache", flush_cache, methods=["GET", "POST"])]


def _untyped(text: str, status_code: int) -> Response:
    """Return a body without ``Content-Type`` (starlette adds none without a media type)."""
    return Response(text.encode(), status_code=status_code)
