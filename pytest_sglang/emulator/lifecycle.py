"""The emulated server's life, as SGLang's http_server.py: phases in order, then shutdown.

- Phase A, loading (``loading``): the port is closed.
- Phase B, warming up (``warmup``): uvicorn listens; ``/health*`` and ``/ready`` answer 503
  while the other endpoints already work, until the warm-up succeeds.
- Phase C, ready: until SIGTERM or SIGINT (``signals``), which end every phase promptly with
  exit status 0.

The ``hang`` fault replaces uvicorn by a listener that never answers (``hang``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Generator

import uvicorn

from pytest_sglang.emulator.config.options import LaunchConfig
from pytest_sglang.emulator.engine.arrivals import Arrivals, kernel_stamps_supported
from pytest_sglang.emulator.engine.power import PowerMeter
from pytest_sglang.emulator.engine.trace import TraceWriter
from pytest_sglang.emulator.http.app import build_app
from pytest_sglang.emulator.runtime.context import EmulatorContext, build_context
from pytest_sglang.emulator.runtime.hang import serve_hang
from pytest_sglang.emulator.runtime.loading import load
from pytest_sglang.emulator.runtime.signals import install_signal_handlers
from pytest_sglang.emulator.runtime.warmup import warmup

# How long uvicorn may finish in-flight responses after a stop signal.
GRACEFUL_SHUTDOWN_S = 1
SHUTDOWN_TIMEOUT_S = 5.0


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The lifecycle owns SIGTERM/SIGINT in every phase and exits 0; uvicorn's own handler
        # would re-raise the signal after shutting down and die by it.
        yield


async def run(config: LaunchConfig) -> int:
    """Run the emulated server through its phases; return the exit status."""
    ctx = build_context(config)
    try:
        return await _run(ctx)
    finally:
        if ctx.gpu_holder is not None:
            ctx.gpu_holder.release()


async def _run(ctx: EmulatorContext) -> int:
    config = ctx.config
    stop = asyncio.Event()
    install_signal_handlers(ctx, stop)
    launched = time.monotonic()
    _log_launch(ctx)
    if not await load(ctx, stop):
        return 0
    ctx.state.startup_time = time.monotonic() - launched
    args = config.server_args
    host, port = str(args["host"]), int(args["port"])
    try:
        sock = _bind(host, port, _arrivals(ctx))
    except OSError as exc:
        logging.getLogger("uvicorn.error").error(
            "%s error while attempting to bind on address %r: %s",
            f"[Errno {exc.errno}]",
            (host, port),
            # asyncio's wording, which uvicorn would have logged: "address already in use".
            (exc.strerror or str(exc)).lower(),
        )
        return 1
    await ctx.engine.start()
    meter = getattr(ctx.engine, "power", None)
    publishing = (
        asyncio.create_task(ctx.gpu_holder.publish(meter))
        if ctx.gpu_holder is not None and isinstance(meter, PowerMeter)
        else None
    )
    try:
        if "hang" in ctx.faults:
            _log_uvicorn_running(host, port)
            await serve_hang(sock, stop)
            return 0
        return await _serve(ctx, sock, stop)
    finally:
        if publishing is not None:
            publishing.cancel()
            await asyncio.gather(publishing, return_exceptions=True)
        await ctx.engine.stop()
        sock.close()


def _log_launch(ctx: EmulatorContext) -> None:
    args = ctx.config.server_args
    ctx.log.info(
        "Emulating SGLang %s (pytest-sglang emulator)%s",
        ctx.options.version,
        f"; faults: {ctx.faults.describe()}" if ctx.faults.active else "",
    )
    ctx.log.info("server_args=ServerArgs(%s)", ", ".join(f"{k}={v!r}" for k, v in args.items()))
    for warning in ctx.config.warnings:
        ctx.log.warning(warning)


def _arrivals(ctx: EmulatorContext) -> Arrivals | None:
    """Return the trace's arrival registry if a trace is written and the kernel can stamp."""
    writer = getattr(ctx.engine, "trace", None)
    if isinstance(writer, TraceWriter) and kernel_stamps_supported():
        return writer.arrivals
    return None


def _bind(host: str, port: int, arrivals: Arrivals | None = None) -> socket.socket:
    # Bound but not listening: connections are refused until uvicorn starts serving on it.
    # The protocol must be named: asyncio sets TCP_NODELAY on accepted connections only when
    # sock.proto == IPPROTO_TCP, and with proto 0 every response written as headers + body
    # waited ~40 ms for the client's delayed ACK (Nagle).
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if arrivals is not None:
        sock: socket.socket = arrivals.listening_socket(family)
    else:
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _log_uvicorn_running(host: str, port: int) -> None:
    shown = f"[{host}]" if ":" in host else host
    logging.getLogger("uvicorn.error").info(
        "Uvicorn running on http://%s:%d (Press CTRL+C to quit)", shown, port
    )


async def _serve(ctx: EmulatorContext, sock: socket.socket, stop: asyncio.Event) -> int:
    """Phases B and C; return the exit status."""
    args = ctx.config.server_args
    config = uvicorn.Config(
        build_app(ctx),
        log_config=None,
        log_level=None,
        access_log=True,
        lifespan="on",
        loop="asyncio",
        http="h11",
        timeout_keep_alive=5,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    server = _Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    # uvicorn exposes only a `started` flag, no event, so poll it briefly.
    while not server.started and not serving.done() and not stop.is_set():  # noqa: ASYNC110
        await asyncio.sleep(0.005)
    if server.started:
        _log_uvicorn_running(str(args["host"]), int(args["port"]))
    warming = asyncio.create_task(warmup(ctx))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopper}, return_when=asyncio.FIRST_COMPLETED)
    ctx.state.shutting_down = True
    # Ending the generations first lets their responses finish within the graceful period.
    await ctx.engine.stop()
    server.should_exit = True
    for task in (warming, stopper):
        task.cancel()
    try:
        await asyncio.wait_for(serving, SHUTDOWN_TIMEOUT_S)
    except TimeoutError:
        ctx.log.warning("uvicorn did not stop within %.0f s; exiting anyway.", SHUTDOWN_TIMEOUT_S)
    return 0 if stop.is_set() else 1
