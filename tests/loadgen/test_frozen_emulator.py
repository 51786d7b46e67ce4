"""A frozen server (the emulator stopped with SIGSTOP) ends a repeated measurement quickly.

Stopped mid-run: the streams in flight stall, the requests waiting for their first token get
none, and after ``max_consecutive_failures`` of them the run raises
:class:`ServerStoppedAnswering`; a measurement of several repeats (as ``sglang_bench`` runs
them) ends there instead of waiting out every request of every repeat.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from pytest_sglang.config.options import DEFAULT_FIRST_TOKEN_TIMEOUT, DEFAULT_STALL_TIMEOUT
from pytest_sglang.loadgen.runner import LoadGenerator, ServerStoppedAnswering
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.testing import running_emulator

WORKLOAD = Workload(input_len=16, output_len=256, requests=64, warmup=0)


def measure_repeats_until_stopped(
    generator: LoadGenerator, pid: int, freeze_after: float, repeats: int = 5
) -> tuple[float, ServerStoppedAnswering]:
    """Run ``repeats`` closed loops at C=8, stopping the server ``freeze_after`` s in."""
    timer = threading.Timer(freeze_after, os.kill, (pid, signal.SIGSTOP))
    began = time.monotonic()
    timer.start()
    try:
        for repeat in range(repeats):
            generator.run_closed_loop(WORKLOAD, 8, repeat=repeat)
    except ServerStoppedAnswering as exc:
        return time.monotonic() - began, exc
    finally:
        timer.cancel()
    raise AssertionError("the measurement ended without noticing the frozen server")


def frozen(tmp_path: Path, generator: LoadGenerator) -> tuple[float, ServerStoppedAnswering]:
    with running_emulator(tmp_path, "--emulator-decode-ms", "20") as emulator:
        generator.url = emulator.url
        try:
            return measure_repeats_until_stopped(generator, emulator.process.pid, 1.0)
        finally:
            os.kill(emulator.process.pid, signal.SIGCONT)


def test_a_sigstopped_emulator_ends_the_measurement(tmp_path: Path) -> None:
    generator = LoadGenerator("http://127.0.0.1:1", stall_timeout=2.0, first_token_timeout=2.0)
    elapsed, exc = frozen(tmp_path, generator)
    assert str(exc).startswith("the server stopped answering: 8 consecutive transport")
    assert "stalled: no new token for 2 s" in str(exc)
    assert exc.unsent > 0 and f"{exc.unsent} of 64 requests not sent" in str(exc)
    assert elapsed < 20


def test_the_default_limits_end_it_within_three_minutes() -> None:
    # The figure: a 5-repeat measurement at C=8 ends within 3 minutes by default. The
    # test above shows it ends when its streams stall or get no first token (2 s limits here).
    assert max(DEFAULT_STALL_TIMEOUT, DEFAULT_FIRST_TOKEN_TIMEOUT) + 20 < 180
