"""Injected faults, each as a real process (``--emulator-fault NAME[=VALUE]``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable

import httpx
import psutil
import pytest

from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import READY_LINE, client, schema_errors

Start = Callable[..., EmulatorProcess]

MISMATCH = (
    "Warning: Target model's context_length (131072) is greater than the derived "
    "context_length (2048). This may lead to incorrect model outputs or CUDA errors. Note that "
    "the derived context_length may differ from max_position_embeddings in the model's config. "
    "To allow overriding this maximum, set the env var SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
)


def wait_exit(emulator: EmulatorProcess, timeout: float = 20.0) -> int:
    try:
        return emulator.process.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running after {timeout}s:\n{emulator.log()}") from None


def test_malformed_models_fails_the_schema_at_the_card(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-fault", "malformed-models")
    with client(emulator) as http:
        response = http.get("/v1/models")
    assert response.status_code == 200
    errors = schema_errors("v1_models", response.json())
    paths = {tuple(error.absolute_path) for error in errors}
    assert ("data", 0) in paths  # `object` is missing from the card
    assert ("data", 0, "max_model_len") in paths  # a string, not an integer


def test_never_ready_keeps_health_at_503(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-fault", "never-ready", wait="port")
    with client(emulator) as http:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            for path in ("/health", "/health_generate", "/ready"):
                response = http.get(path)
                assert response.status_code == 503, path
                assert response.content == b""
            time.sleep(0.1)
        assert http.get("/v1/models").status_code == 200
    assert READY_LINE not in emulator.log()
    assert emulator.process.poll() is None


def test_crash_in_warmup_exits_after_the_port_opened(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--emulator-fault", "crash-in-warmup", "--emulator-warmup-time", "1", wait="port"
    )
    assert wait_exit(emulator) != 0
    log = emulator.log()
    assert "Initialization failed. warmup error: Traceback" in log
    assert log.index("Uvicorn running on") < log.index("Initialization failed")
    assert READY_LINE not in log


def test_context_length_mismatch_dies_before_the_port_opens(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--speculative-algorithm",
        "EAGLE3",
        "--emulator-fault",
        "context-length-mismatch",
        wait=None,
    )
    assert wait_exit(emulator) != 0
    log = emulator.log()
    assert MISMATCH in log
    assert "is greater than the derived context_length" in log
    assert "Uvicorn running" not in log


def test_context_length_mismatch_can_be_overridden(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--emulator-fault",
        "context-length-mismatch=4096",
        env={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"},
    )
    log = emulator.log()
    assert "context_length (131072) is greater than the derived context_length (4096)" in log
    assert "Overriding the draft model's max_position_embeddings to 131072." in log


def test_context_length_within_the_draft_window_starts(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--emulator-fault", "context-length-mismatch=2048", "--context-length", "2048"
    )
    assert READY_LINE in emulator.log()


def test_hang_accepts_connections_but_never_answers(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-fault", "hang", wait="port")
    with socket.create_connection(("127.0.0.1", emulator.port), timeout=5):
        pass
    with client(emulator, timeout=1.0) as http, pytest.raises(httpx.ReadTimeout):
        http.get("/health")
    began = time.monotonic()
    emulator.process.terminate()
    assert wait_exit(emulator, 10) == 0
    assert time.monotonic() - began < 10


def test_never_ready_holds_even_without_warmup(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--emulator-fault", "never-ready", "--skip-server-warmup", wait="port"
    )
    with client(emulator) as http:
        assert http.get("/ready").status_code == 503
    assert READY_LINE not in emulator.log()


def test_ignore_sigterm_keeps_serving_until_sigint(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-fault", "ignore-sigterm")
    emulator.process.send_signal(signal.SIGTERM)
    emulator.wait_for_log("ignoring it (emulated fault ignore-sigterm)")
    with pytest.raises(subprocess.TimeoutExpired):
        emulator.process.wait(1)
    with client(emulator) as http:
        assert http.get("/v1/models").status_code == 200
    emulator.process.send_signal(signal.SIGINT)
    assert wait_exit(emulator, 10) == 0


def test_orphan_child_outlives_the_emulator(start_emulator: Start) -> None:
    tag = uuid.uuid4().hex
    emulator = start_emulator("--emulator-fault", "orphan-child=60", env={"EMULATOR_TEST_TAG": tag})
    children = [
        proc
        for proc in psutil.process_iter()
        if proc.pid != emulator.process.pid and _tagged(proc, tag)
    ]
    try:
        (child,) = children
        assert os.getpgid(child.pid) != emulator.process.pid  # outside the launcher's group
        emulator.stop()
        assert emulator.process.returncode == 0
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
    finally:
        for proc in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        # Reparented to init, the child is reaped by init, not us: just see it die.
        deadline = time.monotonic() + 5
        while any(_alive(proc) for proc in children) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not any(_alive(proc) for proc in children)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _tagged(proc: psutil.Process, tag: str) -> bool:
    try:
        return proc.environ().get("EMULATOR_TEST_TAG") == tag
    except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
