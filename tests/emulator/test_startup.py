"""Startup phases, the health endpoints' timing, and signals (reference §1.1, §1.2)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

from pytest_sglang.testing import EmulatorProcess, port_open
from tests.emulator.conftest import READY_LINE, client

Start = Callable[..., EmulatorProcess]


def test_phases_closed_then_warming_then_ready(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-load-time", "1", "--emulator-warmup-time", "2", wait=None)
    # Phase A: loading, port closed.
    emulator.wait_for_log("Load weight begin")
    assert not port_open(emulator.port)
    # Phase B: port open, health 503 with an empty body, the rest already answers.
    emulator.wait_for_port()
    with client(emulator) as http:
        for path in ("/health", "/health_generate", "/ready"):
            response = http.get(path)
            assert response.status_code == 503, path
            assert response.content == b"", path
        assert READY_LINE not in emulator.log()
        assert http.get("/v1/models").status_code == 200
        assert http.get("/model_info").status_code == 200
        assert http.get("/server_info").status_code == 200
        generated = http.post(
            "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 2}}
        )
        assert generated.status_code == 200
        # Phase C: the warm-up request succeeded and the ready line is out.
        emulator.wait_for_log(READY_LINE)
        for path in ("/health", "/health_generate", "/ready"):
            response = http.get(path)
            assert response.status_code == 200, path
            assert response.content == b"", path
    log = emulator.log()
    running = f"Uvicorn running on http://127.0.0.1:{emulator.port} (Press CTRL+C to quit)"
    assert log.index("Load weight begin") < log.index(running) < log.index(READY_LINE)
    # The warm-up polled the model info and sent SGLang's warm-up generation.
    assert log.index('"GET /model_info HTTP/1.1" 200') < log.index(READY_LINE)
    assert log.index('"POST /generate HTTP/1.1" 200') < log.index(READY_LINE)


def test_log_lines_look_like_sglang(emulator: EmulatorProcess) -> None:
    lines = emulator.log().splitlines()
    ready = [line for line in lines if line.endswith(READY_LINE)]
    assert len(ready) == 1
    # "[2026-12-02 16:00:00] The server is fired up and ready to roll!"
    stamp = ready[0][: -len(READY_LINE)]
    assert time.strptime(stamp.strip(), "[%Y-%m-%d %H:%M:%S]")
    assert any("] INFO:     Uvicorn running on http://127.0.0.1:" in line for line in lines)
    assert any(" TP0] Load weight end. type=LlamaForCausalLM" in line for line in lines)


def test_skip_server_warmup_is_ready_at_once(start_emulator: Start) -> None:
    emulator = start_emulator("--skip-server-warmup", "--emulator-warmup-time", "30")
    with client(emulator) as http:
        assert http.get("/ready").status_code == 200
        assert http.get("/health").status_code == 200
    assert "POST /generate" not in emulator.log()


def test_healthy_probe_takes_the_probe_time_and_ready_does_not(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-health-probe-time", "0.5")
    with client(emulator) as http:
        for path in ("/health_generate", "/health"):
            began = time.monotonic()
            assert http.get(path).status_code == 200
            assert time.monotonic() - began >= 0.5, path
        began = time.monotonic()
        assert http.get("/ready").status_code == 200
        assert time.monotonic() - began < 0.5


def test_health_without_generation_answers_at_once(start_emulator: Start) -> None:
    emulator = start_emulator(
        "--emulator-health-probe-time",
        "5",
        env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "false"},
    )
    with client(emulator) as http:
        began = time.monotonic()
        assert http.get("/health").status_code == 200
        assert time.monotonic() - began < 5


def _stop(emulator: EmulatorProcess, signum: int) -> int:
    emulator.process.send_signal(signum)
    try:
        return emulator.process.wait(10)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"no exit 10 s after {signum}:\n{emulator.log()}") from None


def test_sigterm_during_load_exits_zero(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-load-time", "60", wait=None)
    emulator.wait_for_log("Load weight begin")
    assert _stop(emulator, signal.SIGTERM) == 0


def test_sigint_during_warmup_exits_zero(start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-warmup-time", "60", wait="port")
    assert _stop(emulator, signal.SIGINT) == 0


def test_sigterm_ends_open_streams_and_exits_zero(start_emulator: Start) -> None:
    emulator = start_emulator()
    body = {
        "text": "x",
        "stream": True,
        "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True},
    }
    with client(emulator) as http, http.stream("POST", "/generate", json=body) as response:
        lines = response.iter_lines()
        assert next(lines).startswith("data: ")
        emulator.process.send_signal(signal.SIGTERM)
        rest = [line for line in lines if line]
    assert rest[-1] == "data: [DONE]"
    assert '"type":"abort"' in rest[-2]
    assert emulator.process.wait(10) == 0
    assert "Received SIGTERM" in emulator.log()
