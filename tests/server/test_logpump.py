"""The log pump keeps a server's log byte for byte, less the secrets (``process.pump``)."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.emulator.runtime.warmup import READY_LINE as EMULATOR_READY_LINE
from pytest_sglang.server.process import MAX_LINE, READY_LINE, ServerProcess, pump


def _pumped(
    data: bytes, secrets: tuple[str, ...] = (), on_ready: Callable[[], None] = lambda: None
) -> bytes:
    read_end, write_end = os.pipe()
    sink_read, sink_write = os.pipe()
    out: list[bytes] = []

    def drain() -> None:
        while chunk := os.read(sink_read, 65536):
            out.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()

    def feed() -> None:
        # Written in small pieces: lines cross the pump's reads.
        for start in range(0, len(data), 7):
            os.write(write_end, data[start : start + 7])
        os.close(write_end)

    writer = threading.Thread(target=feed)
    writer.start()
    pump(read_end, sink_write, Redactor(secrets), on_ready)
    writer.join()
    os.close(read_end)
    os.close(sink_write)
    reader.join()
    os.close(sink_read)
    return b"".join(out)


def test_every_byte_but_the_secrets_is_kept() -> None:
    data = (
        b"[2026] server_args=ServerArgs(model_path='m', api_key='sk-abc123', port=30000)\n"
        b"progress 10%\rprogress 20%\r\xff\xfe not UTF-8 \xc3\n"
        b"token sk-abc123 again, no end"
    )
    assert _pumped(data, ("sk-abc123",)) == (
        b"[2026] server_args=ServerArgs(model_path='m', api_key='***', port=30000)\n"
        b"progress 10%\rprogress 20%\r\xff\xfe not UTF-8 \xc3\n"
        b"token *** again, no end"
    )


def test_a_line_without_an_end_is_written_in_pieces() -> None:
    data = b"x" * (3 * MAX_LINE) + b"\n"
    assert _pumped(data) == data


def test_the_ready_line_is_signalled_once_as_it_passes() -> None:
    ready: list[int] = []
    line = b"[2026-12-02 16:00:00] " + READY_LINE.encode() + b"\n"
    data = b"loading\n" + line + b"serving\n" + line
    assert _pumped(data, on_ready=lambda: ready.append(1)) == data
    assert ready == [1]


def test_the_emulator_prints_the_ready_line_the_pump_looks_for() -> None:
    # Two sealed programs, one string: SGLang's own (identical in every release checked).
    assert EMULATOR_READY_LINE == READY_LINE


def _server(tmp_path: Path, script: str) -> ServerProcess:
    log = tmp_path / "server.log"
    return ServerProcess([sys.executable, "-c", script], env=dict(os.environ), log_path=log)


def test_a_launched_server_s_ready_line_ends_the_wait_at_once(tmp_path: Path) -> None:
    server = _server(
        tmp_path, f"import time; print('loading'); print({READY_LINE!r}); time.sleep(120)"
    )
    server.start()
    try:
        start = time.monotonic()
        assert server.wait_ready_line(60.0) is True
        assert time.monotonic() - start < 60.0
        assert READY_LINE in (tmp_path / "server.log").read_text()
    finally:
        server.stop(grace=5.0)


def test_a_server_that_exits_without_the_ready_line_ends_the_wait(tmp_path: Path) -> None:
    server = _server(tmp_path, "print('Traceback: CUDA error')")
    server.start()
    try:
        start = time.monotonic()
        assert server.wait_ready_line(60.0) is False
        assert time.monotonic() - start < 60.0
    finally:
        server.stop(grace=5.0)


def test_listens_on_reads_only_the_launch_s_own_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # macOS refuses the host-wide connection table to a non-root user (psutil.AccessDenied);
    # a launch's own processes' connections are readable everywhere.
    import psutil

    def refused(kind: str = "inet") -> list[object]:
        raise psutil.AccessDenied()

    listen = (
        "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
        "print(s.getsockname()[1], flush=True); time.sleep(120)"
    )
    server = _server(tmp_path, listen)
    server.start()
    try:
        log = tmp_path / "server.log"
        deadline = time.monotonic() + 60
        while not log.read_text().strip() and time.monotonic() < deadline:
            server.poll(0.05)
        port = int(log.read_text().split()[0])
        monkeypatch.setattr(psutil, "net_connections", refused)
        assert server.listens_on(port) is True
        assert server.listens_on(port + 1 if port < 65535 else port - 1) is False
    finally:
        server.stop(grace=5.0)
