"""Signals and fatal exits.

SIGTERM and SIGINT stop the emulator cleanly (exit status 0) in every phase; a second signal
exits at once. Fatal startup errors end the process the way SGLang's ``kill_process_tree`` does:
SIGKILL to itself, so the exit status is -9.
"""

from __future__ import annotations

import asyncio
import os
import signal

from pytest_sglang.emulator.runtime import logs
from pytest_sglang.emulator.runtime.context import EmulatorContext


def install_signal_handlers(ctx: EmulatorContext, stop: asyncio.Event) -> None:
    """Set ``stop`` (and the shutting-down flag) on SIGTERM/SIGINT; exit at once on a second."""
    loop = asyncio.get_running_loop()

    def handle(signum: int) -> None:
        if signum == signal.SIGTERM and "ignore-sigterm" in ctx.faults:
            ctx.log.warning("Received SIGTERM; ignoring it (emulated fault ignore-sigterm).")
            return
        if stop.is_set():
            logs.flush()
            os._exit(0)
        ctx.log.info("Received %s, shutting down.", signal.Signals(signum).name)
        ctx.state.shutting_down = True
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, handle, signum)


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds``; return whether ``stop`` was set meanwhile."""
    if seconds <= 0:
        return stop.is_set()
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


def kill_self() -> None:
    """Die like SGLang's ``kill_process_tree(os.getpid())``: SIGKILL, logs flushed first."""
    logs.flush()
    os.kill(os.getpid(), signal.SIGKILL)
