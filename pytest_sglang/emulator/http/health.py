"""``/health``, ``/health_generate``, ``/ready`` and ``/ping``, as SGLang's http_server.py.

Both health routes run one handler: 503 with an empty body while starting or shutting down;
once up, a one-token probe generation and a wait (``--emulator-health-probe-time``, about 1 s on
a real server) until any output has reached the tokenizer side, then 200 with an empty body. No
output within ``SGLANG_HEALTH_CHECK_TIMEOUT`` (20 s) answers 503 and marks the server UnHealthy.
``/health`` skips the probe when ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` is false.
``/ready`` and ``/ping`` (0.5.23 only) answer at once from the status.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pytest_sglang.emulator.engine.engine import GenerationRequest
from pytest_sglang.emulator.http.web import empty_response
from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.state import ServerStatus

# SGLang's probe loop sleeps 1 s between checks; the emulator keeps that ceiling.
PROBE_POLL_MAX = 1.0
PROBE_POLL_MIN = 0.01


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """Return the health routes of the emulated version."""

    async def health(request: Request) -> Response:
        state = ctx.state
        if state.shutting_down:
            ctx.log.info("Health check request received during shutdown. Returning 503.")
            return empty_response(503)
        if state.status is ServerStatus.STARTING:
            return empty_response(503)
        if request.url.path == "/health" and not ctx.health.generate_on_health:
            return empty_response(200)
        return empty_response(await probe(ctx))

    async def ready(request: Request) -> Response:
        state = ctx.state
        up = state.status is ServerStatus.UP and not state.paused and not state.shutting_down
        return empty_response(200 if up else 503)

    async def ping(request: Request) -> Response:
        state = ctx.state
        up = state.status is ServerStatus.UP and not state.shutting_down
        return empty_response(200 if up else 503)

    result: list[BaseRoute] = [
        Route("/health", health, methods=["GET"]),
        Route("/health_generate", health, methods=["GET"]),
    ]
    if ctx.is_new:
        result += [Route("/ready", ready, methods=["GET"]), Route("/ping", ping, methods=["GET"])]
    return result


async def probe(ctx: EmulatorContext) -> int:
    """Run SGLang's health probe; return the status code to answer."""
    tokenizer_stats = ctx.stats.tokenizer
    seen = tokenizer_stats.output_events
    suffix = uuid.uuid4().hex if ctx.is_new else str(time.time())
    request = GenerationRequest(
        rid=f"HEALTH_CHECK_{suffix}",
        input_ids=[0],
        max_new_tokens=1,
        temperature=0.0,
        log_metrics=False,
    )
    task = asyncio.create_task(ctx.run(request, streaming=False).run_to_end())
    deadline = time.monotonic() + ctx.health.timeout
    wait = ctx.options.health_probe_time
    try:
        await asyncio.sleep(wait)
        while True:
            if tokenizer_stats.output_events > seen:
                ctx.state.status = ServerStatus.UP
                return 200
            if time.monotonic() >= deadline:
                ctx.state.status = ServerStatus.UNHEALTHY
                ctx.log.error(
                    "Health check failed. Server couldn't get a response from detokenizer for "
                    "last %g seconds.",
                    ctx.health.timeout,
                )
                return 503
            await asyncio.sleep(min(PROBE_POLL_MAX, max(wait, PROBE_POLL_MIN)))
    finally:
        if not task.done():
            task.cancel()
