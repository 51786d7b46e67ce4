"""The Starlette application for one emulated SGLang version."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute

from pytest_sglang.emulator.engine.trace import TraceMiddleware, TraceWriter
from pytest_sglang.emulator.http import (
    admin,
    fault_middleware,
    health,
    info,
    metrics,
    native,
    openai_api,
)
from pytest_sglang.emulator.http.auth import ApiKeyMiddleware
from pytest_sglang.emulator.http.web import json_response
from pytest_sglang.emulator.runtime.context import EmulatorContext


async def _http_error(request: Request, exc: Exception) -> Response:
    # FastAPI's shape for routing errors: 404 {"detail":"Not Found"}, 405 with an Allow header.
    assert isinstance(exc, HTTPException)
    response = json_response({"detail": exc.detail}, exc.status_code)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def build_app(ctx: EmulatorContext) -> Starlette:
    """Routes of ``ctx``'s version, CORS for any origin, the API-key check when configured."""
    routes: list[BaseRoute] = [
        *info.routes(ctx),
        *health.routes(ctx),
        *native.routes(ctx),
        *openai_api.routes(ctx),
        *admin.routes(ctx),
    ]
    if ctx.config.server_args["enable_metrics"]:
        routes += metrics.routes(ctx)
    middleware = [
        Middleware(
            CORSMiddleware,
            allow_origins=["*"],
            allow_credentials=True,
            allow_methods=["*"],
            allow_headers=["*"],
        )
    ]
    if ctx.config.server_args["enable_metrics"] and ctx.is_new:
        middleware.append(Middleware(metrics.HttpMetricsMiddleware, ctx=ctx))
    if fault_middleware.active(ctx):
        middleware.append(Middleware(fault_middleware.GenerationFaults, ctx=ctx))
    writer = getattr(ctx.engine, "trace", None)
    if isinstance(writer, TraceWriter):
        # Ground truth (--emulator-trace): stamp generation requests as early as possible.
        middleware.insert(0, Middleware(TraceMiddleware, writer=writer))
    api_key = ctx.config.api_key
    if api_key is not None:
        # Outermost, as SGLang adds it last: unknown paths answer 401 before 404.
        middleware.insert(
            0,
            Middleware(ApiKeyMiddleware, api_key=api_key, case_insensitive_scheme=ctx.is_new),
        )
    return Starlette(
        routes=routes, middleware=middleware, exception_handlers={HTTPException: _http_error}
    )
