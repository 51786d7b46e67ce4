"""Phase B, warm-up: SGLang's ``_execute_server_warmup``, over HTTP to this very server.

It polls ``/model_info`` (``/get_model_info`` on 0.5.5), waits ``--emulator-warmup-time``, sends
SGLang's warm-up ``/generate``, flips the status to Up and logs the ready line. A failure logs
``Initialization failed. warmup error: <traceback>`` and kills the process. The
``crash-in-warmup`` and ``never-ready`` faults strike here (even with ``--skip-server-warmup``).
"""

from __future__ import annotations

import asyncio
import os
import traceback
from typing import Any

import httpx

from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.signals import kill_self
from pytest_sglang.emulator.runtime.state import ServerStatus

READY_LINE = "The server is fired up and ready to roll!"
WARMUP_TEXT = "The capital city of France is"
WARMUP_FAILED = "Initialization failed. warmup error: "


async def warmup(ctx: EmulatorContext) -> None:
    """Warm up, then mark the server Up and log the ready line; die on failure."""
    args = ctx.config.server_args
    try:
        if args["skip_server_warmup"]:
            # Faults asked for explicitly still strike, even without a warm-up request.
            await _warmup_faults(ctx)
        else:
            await _execute_warmup(ctx)
        ctx.state.status = ServerStatus.UP
        ctx.log.info(READY_LINE)
    except asyncio.CancelledError:
        raise
    except Exception:
        ctx.log.error("%s%s", WARMUP_FAILED, traceback.format_exc())
        kill_self()


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
        await _warmup_faults(ctx)
        response = await client.post("/generate", json=payload, timeout=_warmup_timeout())
        if response.status_code != 200:
            raise RuntimeError(f"/generate answered {response.status_code}: {response.text}")


async def _warmup_faults(ctx: EmulatorContext) -> None:
    if "crash-in-warmup" in ctx.faults:
        _emulated_cuda_error()
    if "never-ready" in ctx.faults:
        # The warm-up request never returns; health stays 503 until the process is stopped.
        await asyncio.Event().wait()


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
