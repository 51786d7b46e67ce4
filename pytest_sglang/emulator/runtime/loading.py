"""Phase A, loading: the port stays closed while SGLang-like load lines are logged.

``--emulator-load-time`` is spread over the steps a real server logs (weights, KV cache, CUDA
graphs). The ``context-length-mismatch`` fault strikes here, where SGLang builds the draft
model's config, and kills the process before the port opens.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Callable

from pytest_sglang.emulator.runtime import logs
from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.signals import kill_self, stopped_within

GPU_MEMORY_GB = 79.1


async def load(ctx: EmulatorContext, stop: asyncio.Event) -> bool:
    """Run phase A; return False if a signal stopped it."""
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
        if "orphan-child" in ctx.faults:
            _spawn_orphan(ctx)
        sched_log.info("Load weight begin. avail mem=%.2f GB", GPU_MEMORY_GB)

    def weights_end() -> None:
        sched_log.info(
            "Load weight end. type=%s, dtype=torch.bfloat16, avail mem=%.2f GB, mem usage=%.2f GB.",
            model.architecture,
            after_weights,
            weight,
        )
        if ctx.gpu_holder is not None:
            ctx.gpu_holder.hold(int(weight * 1024))

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
        if ctx.gpu_holder is not None:
            ctx.gpu_holder.hold()

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
        if await stopped_within(stop, (fraction - done) * ctx.options.load_time):
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
    kill_self()


# Children must stay referenced: a collected Popen of a live process warns.
_ORPHANS: list[subprocess.Popen[bytes]] = []


def _spawn_orphan(ctx: EmulatorContext) -> None:
    """Start a child that escapes the launcher's process group (SGLang subprocesses can)."""
    lifetime = float(ctx.faults.value("orphan-child") or 0.0)
    child = subprocess.Popen(
        [sys.executable, "-c", f"import time; time.sleep({lifetime!r})"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    _ORPHANS.append(child)
    ctx.log.warning(
        "Started child pid %d in its own session (emulated fault orphan-child).", child.pid
    )


def _raise_value_error(message: str) -> None:
    raise ValueError(message)
