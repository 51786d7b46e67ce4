"""Response latency of the HTTP layer: no Nagle/delayed-ACK stall on small responses.

The emulator binds its listening socket itself; asyncio sets TCP_NODELAY on accepted
connections only when that socket's protocol is ``IPPROTO_TCP``. With protocol 0 every
response written as headers + body waited for the client's delayed ACK: ~40 ms per request
on a keep-alive connection (``/v1/models``, ``/server_info``, the first chunk of a stream).
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable

from pytest_sglang.emulator.lifecycle import _bind
from pytest_sglang.testing import EmulatorProcess, free_port
from tests.emulator.conftest import client

Start = Callable[..., EmulatorProcess]


def test_listening_socket_names_tcp() -> None:
    sock = _bind("127.0.0.1", free_port())
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()


def test_json_responses_do_not_wait_for_delayed_acks(emulator: EmulatorProcess) -> None:
    durations: dict[str, list[float]] = {}
    with client(emulator) as http:
        http.get("/ready")  # open the keep-alive connection
        for _ in range(8):
            for path in ("/v1/models", "/server_info", "/model_info", "/ready"):
                start = time.perf_counter()
                assert http.get(path).status_code == 200
                durations.setdefault(path, []).append(time.perf_counter() - start)
    # A delayed ACK is 40 ms on Linux; a median far below it cannot be luck.
    for path, values in durations.items():
        assert statistics.median(values) < 0.025, (path, values)
