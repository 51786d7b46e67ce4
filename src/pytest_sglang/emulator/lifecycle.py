"""Startup phases, warm-up, signals and shutdown (reference §1.1).

- Phase A, loading (``--emulator-load-time``): the port is closed; SGLang-like load lines are
  logged. ``context-length-mismatch`` kills the process here.
- Phase B, warming up: uvicorn listens; ``/health*`` and ``/ready`` answer 503 while the other
  endpoints already work. The warm-up polls ``/model_info``, waits ``--emulator-warmup-time``,
  sends SGLang's warm-up ``/generate`` over HTTP, flips the status to Up and logs the ready
  line. ``crash-in-warmup`` and ``never-ready`` strike here; ``--skip-server-warmup`` skips it.
- Phase C, ready: until SIGTERM or SIGINT, which end every phase promptly with exit status 0
  (a second signal exits at once).

Fatal startup errors end the process the way SGLang's ``kill_process_tree`` does: SIGKILL to
itself, so the exit status is -9.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
import traceback
from collections.abc import Callable, Generator
from typing import Any

import httpx
import uvicorn

from pytest_sglang.emulator import logs
from pytest_sglang.emulator.app import build_app
from pytest_sglang.emulator.config import LaunchConfig
from pytest_sglang.emulator.context import EmulatorContext, build_context
from pytest_sglang.emulator.hang import serve_hang
from pytest_sglang.emulator.state import ServerStatus

READY_LINE = "The server is fired up and ready to roll!"
WARMUP_TEXT = "The capital city of France is"
WARMUP_FAILED = "Initialization failed. warmup error: "
# How long uvicorn may finish in-flight responses after a stop signal.
GRACEFUL_SHUTDOWN_S = 1
SHUTDOWN_TIMEOUT_S = 5.0
GPU_MEMORY_GB = 79.1


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The lifecycle owns SIGTERM/SIGINT in every phase and exits 0; uvicorn's own handler
        # would re-raise the signal after shutting down and die by it.
        yield


async def run(config: LaunchConfig) -> int:
    """Run the emulated server through its phases; return the exit status."""
    ctx = build_context(config)
    stop = asyncio.Event()
    _install_signal_handlers(ctx, stop)
    launched = time.monotonic()
    _log_launch(ctx)
    if not await _load(ctx, stop):
        return 0
    ctx.state.startup_time = time.monotonic() - launched
    args = config.server_args
    host, port = str(args["host"]), int(args["port"])
    try:
        sock = _bind(host, port)
    except OSError as exc:
        logging.getLogger("uvicorn.error").error(
            "%s error while attempting to bind on address %r: %s",
            f"[Errno {exc.errno}]",
            (host, port),
            exc.strerror,
        )
        return 1
    await ctx.engine.start()
    try:
        if "hang" in ctx.faults:
            _log_uvicorn_running(host, port)
            await serve_hang(sock, stop)
            return 0
        return await _serve(ctx, sock, stop)
    finally:
        await ctx.engine.stop()
        sock.close()


def _install_signal_handlers(ctx: EmulatorContext, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()

    def handle(signum: int) -> None:
        if stop.is_set():
            logs.flush()
            os._exit(0)
        ctx.log.info("Received %s, shutting down.", signal.Signals(signum).name)
        ctx.state.shutting_down = True
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    if seconds <= 0:
        return stop.is_set()
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except asyncio.TimeoutError:
        return False
    return True


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


async def _load(ctx: EmulatorContext, stop: asyncio.Event) -> bool:
    """Phase A; return False if a signal stopped it."""
    sched_log = logs.scheduler_logger()
    model = ctx.config.model
    args = ctx.config.server_args
    sched = ctx.scheduler
    tp = max(1, int(args["tp_size"]))
    weight = model.params_billion * 2 / tp
    kv = sched.max_total_num_tokens * 65536 / tp / 1e9
    after_weights = GPU_MEMORY_GB - weight
    after_kv = after_weights - kv

    def weights_begin() -> None:
        sched_log.info("Load weight begin. avail mem=%.2f GB", GPU_MEMORY_GB)

    def weights_end() -> None:
        sched_log.info(
            "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB.",
            model.architecture,
            after_weights,
            weight,
        )

    def draft_check() -> None:
        if "context-length-mismatch" in ctx.faults:
            _draft_context_check(ctx, sched_log)

    def kv_cache() -> None:
        sched_log.info(
            "KV Cache is allocated. #tokens: %d, K size: %.2f GB, V size: %.2f GB",
            sched.max_total_num_tokens,
            kv / 2,
            kv / 2,
        )
        sched_log.info("Memory pool end. avail mem=%.2f GB", after_kv)

    def graph_begin() -> None:
        sched_log.info(
            "Capture cuda graph begin. This can take up to several minutes. avail mem=%.2f GB",
            after_kv,
        )

    def graph_end() -> None:
        sched_log.info(
            "Capture cuda graph end. Time elapsed: %.2f s. mem usage=0.51 GB. avail mem=%.2f GB.",
            ctx.options.load_time * 0.4,
            after_kv - 0.51,
        )
        sched_log.info(
            "max_total_num_tokens=%d, chunked_prefill_size=%s, max_prefill_tokens=%s, "
            "max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB",
            sched.max_total_num_tokens,
            args["chunked_prefill_size"],
            args["max_prefill_tokens"],
            sched.max_running_requests,
            ctx.config.context_length,
            after_kv - 0.51,
        )

    plan: list[tuple[float, Callable[[], None]]] = [
        (0.0, weights_begin),
        (0.35, weights_end),
        (0.5, draft_check),
        (0.55, kv_cache),
        (0.6, graph_begin),
        (1.0, graph_end),
    ]
    done = 0.0
    for fraction, step in plan:
        if await _stopped_within(stop, (fraction - done) * ctx.options.load_time):
            return False
        done = fraction
        step()
    return not stop.is_set()


def _draft_context_check(ctx: EmulatorContext, sched_log: logging.Logger) -> None:
    """SGLang's ``ModelConfig._derive_context_length`` check for the draft model."""
    derived = int(ctx.faults.value("context-length-mismatch") or 2048)
    target = ctx.config.context_length
    if target <= derived:
        return
    message = (
        f"Warning: Target model's context_length ({target}) is greater than the derived "
        f"context_length ({derived}). This may lead to incorrect model outputs or CUDA errors. "
        "Note that the derived context_length may differ from max_position_embeddings in the "
        "model's config. To allow overriding this maximum, set the env var "
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
    )
    allow = os.environ.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "").strip().lower()
    if allow in ("1", "true"):
        sched_log.warning(message)
        sched_log.info("Overriding the draft model's max_position_embeddings to %d.", target)
        return
    try:
        _raise_value_error(message)
    except ValueError:
        sched_log.error("Scheduler hit an exception: %s", traceback.format_exc())
    ctx.log.error("Received sigquit from a child process. It usually means the child failed.")
    _kill_self()


def _raise_value_error(message: str) -> None:
    raise ValueError(message)


def _bind(host: str, port: int) -> socket.socket:
    # Bound but not listening: connections are refused until uvicorn starts serving on it.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
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
    warmup = asyncio.create_task(_warmup(ctx))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({serving, stopper}, return_when=asyncio.FIRST_COMPLETED)
    ctx.state.shutting_down = True
    # Ending the generations first lets their responses finish within the graceful period.
    await ctx.engine.stop()
    server.should_exit = True
    for task in (warmup, stopper):
        task.cancel()
    try:
        await asyncio.wait_for(serving, SHUTDOWN_TIMEOUT_S)
    except asyncio.TimeoutError:
        ctx.log.warning("uvicorn did not stop within %.0f s; exiting anyway.", SHUTDOWN_TIMEOUT_S)
    return 0 if stop.is_set() else 1


async def _warmup(ctx: EmulatorContext) -> None:
    args = ctx.config.server_args
    try:
        if args["skip_server_warmup"]:
            ctx.state.status = ServerStatus.UP
        else:
            await _execute_warmup(ctx)
            ctx.state.status = ServerStatus.UP
        ctx.log.info(READY_LINE)
    except asyncio.CancelledError:
        raise
    except Exception:
        ctx.log.error("%s%s", WARMUP_FAILED, traceback.format_exc())
        _kill_self()


async def _execute_warmup(ctx: EmulatorContext) -> None:
    """SGLang's ``_execute_server_warmup``, over HTTP to this very server."""
    args = ctx.config.server_args
    headers = {}
    if ctx.config.api_key is not None:
        headers["Authorization"] = f"Bearer {ctx.config.api_key}"
    info_path = "/model_info" if ctx.is_new else "/get_model_info"
    dp_size = max(1, int(args["dp_size"]))
    payload: dict[str, Any] = {
        "text": WARMUP_TEXT if dp_size == 1 else [WARMUP_TEXT] * dp_size,
        "sampling_params": {"temperature": 0, "max_new_tokens": 8},
    }
    base = _loopback_url(str(args["host"]), int(args["port"]))
    async with httpx.AsyncClient(base_url=base, headers=headers, trust_env=False) as client:
        for _ in range(120):
            try:
                response = await client.get(info_path, timeout=5)
                break
            except httpx.HTTPError:
                await asyncio.sleep(1)
        else:
            raise RuntimeError(f"{info_path} did not answer")
        if response.status_code != 200:
            raise RuntimeError(f"{info_path} answered {response.status_code}: {response.text}")
        await asyncio.sleep(ctx.options.warmup_time)
        if "crash-in-warmup" in ctx.faults:
            _emulated_cuda_error()
        if "never-ready" in ctx.faults:
            # The warm-up request never returns; health stays 503 until the process is stopped.
            await asyncio.Event().wait()
        response = await client.post("/generate", json=payload, timeout=_warmup_timeout())
        if response.status_code != 200:
            raise RuntimeError(f"/generate answered {response.status_code}: {response.text}")


def _emulated_cuda_error() -> None:
    raise RuntimeError(
        "CUDA error: an illegal memory access was encountered (emulated fault crash-in-warmup)"
    )


def _warmup_timeout() -> float:
    try:
        value = float(os.environ.get("SGLANG_WARMUP_TIMEOUT", "600"))
    except ValueError:
        value = 600.0
    return value if value > 0 else 600.0


def _loopback_url(host: str, port: int) -> str:
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _kill_self() -> None:
    # SGLang's kill_process_tree(os.getpid()) SIGKILLs the whole tree, itself included.
    logs.flush()
    os.kill(os.getpid(), signal.SIGKILL)
