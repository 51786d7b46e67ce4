"""Generation faults (``error-rate``, ``stall-stream``, ``crash-under-load``) as real processes."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from pytest_sglang.emulator.config import faults
from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import client, sse_data

Start = Callable[..., EmulatorProcess]

BATCH = ("--emulator-engine", "batch", "--emulator-speedup", "20")


def _body(tokens: int = 4, *, stream: bool = False) -> dict[str, Any]:
    return {
        "input_ids": list(range(1000, 1016)),
        "sampling_params": {"max_new_tokens": tokens, "ignore_eos": True},
        "stream": stream,
    }


def test_the_faults_are_registered_with_values() -> None:
    registry = faults.registered()
    for name in ("error-rate", "stall-stream", "crash-under-load"):
        assert name in registry and registry[name].help
    assert faults.parse_fault("error-rate=0.25") == ("error-rate", 0.25)
    assert faults.parse_fault("stall-stream") == ("stall-stream", 4)
    assert faults.parse_fault("crash-under-load=3") == ("crash-under-load", 3)


def _statuses(emulator: EmulatorProcess, count: int) -> list[int]:
    with client(emulator) as http:
        return [http.post("/generate", json=_body(1)).status_code for _ in range(count)]


def test_error_rate_fails_that_share_reproducibly(start_emulator: Start) -> None:
    flags = (*BATCH, "--emulator-fault", "error-rate=0.5", "--emulator-seed", "3")
    first = _statuses(start_emulator(*flags), 60)
    again = _statuses(start_emulator(*flags), 60)
    other = _statuses(start_emulator(*BATCH, "--emulator-fault", "error-rate=0.5"), 60)
    assert set(first) == {200, 500}
    assert 15 <= first.count(500) <= 45
    assert first == again  # seeded: the same requests fail
    assert first != other  # another seed, another pattern


def test_error_rate_answers_sglang_error_bodies(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, "--emulator-fault", "error-rate=1")
    with client(emulator) as http:
        native = http.post("/generate", json=_body(stream=True))
        completion = http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})
        chat = http.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
        )
        # Everything else is untouched, and the warm-up got through (the server is ready).
        assert http.get("/health_generate").status_code == 200
        assert http.get("/v1/models").status_code == 200
    assert native.status_code == 500
    assert set(native.json()) == {"error"}
    assert "error-rate" in native.json()["error"]["message"]
    for response in (completion, chat):
        assert response.status_code == 500
        body = response.json()
        assert body["object"] == "error" and body["code"] == 500
        assert body["type"] == "InternalServerError" and body["param"] is None


def test_stall_stream_stops_mid_way_and_keeps_the_connection(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, "--emulator-fault", "stall-stream=3")
    received: list[bytes] = []
    timeout = httpx.Timeout(10.0, read=1.0)
    with httpx.Client(base_url=emulator.url, timeout=timeout, trust_env=False) as http:
        with pytest.raises(httpx.ReadTimeout):
            with http.stream("POST", "/generate", json=_body(32, stream=True)) as response:
                assert response.status_code == 200
                for chunk in response.iter_raw():
                    received.append(chunk)  # noqa: PERF402 - kept until the stall
        data = b"".join(received)
        assert data.count(b"data: {") == 3
        assert b"[DONE]" not in data
        # Non-streamed requests are not affected, and the server stays healthy.
        assert http.post("/generate", json=_body(8)).status_code == 200
        assert http.get("/health").status_code == 200
    assert emulator.process.poll() is None


def test_stall_stream_leaves_short_streams_alone(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, "--emulator-fault", "stall-stream=8")
    with (
        client(emulator) as http,
        http.stream("POST", "/generate", json=_body(4, stream=True)) as r,
    ):
        assert sse_data(r)[-1] == "[DONE]"


def test_crash_under_load_kills_the_process(start_emulator: Start) -> None:
    emulator = start_emulator(*BATCH, "--emulator-fault", "crash-under-load=3")
    outcomes: list[str] = []

    def send() -> None:
        try:
            with client(emulator, timeout=10) as http:
                http.post("/generate", json=_body(2000))
                outcomes.append("answered")
        except httpx.HTTPError as exc:
            outcomes.append(type(exc).__name__)

    threads = [threading.Thread(target=send) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        code = emulator.process.wait(15)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"still running:\n{emulator.log()}") from None
    for thread in threads:
        thread.join(15)
    assert code == -signal.SIGKILL
    assert "Scheduler hit an exception" in emulator.log()
    assert "crash-under-load" in emulator.log()
    assert len(outcomes) == 3 and "answered" not in outcomes


def test_crash_under_load_spares_the_warmup(start_emulator: Start) -> None:
    # N=1: the warm-up request does not count, the first request after start-up does.
    emulator = start_emulator(*BATCH, "--emulator-fault", "crash-under-load=1")
    assert emulator.process.poll() is None
    with client(emulator) as http, pytest.raises(httpx.HTTPError):
        http.post("/generate", json=_body(2000))
    assert emulator.process.wait(15) == -signal.SIGKILL
