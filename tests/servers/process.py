"""Run a test server of ``tests.servers`` as a subprocess on a free loopback port."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_open(port: int) -> bool:
    """Return whether something accepts TCP connections on 127.0.0.1:``port``."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
        return True
    return False


@dataclass
class ServerProcess:
    """A running test server: its URL and process."""

    port: int
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict[str, Any]:
        """The server's own counts (``GET /stats``)."""
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as response:
            data: dict[str, Any] = json.load(response)
            return data

    def reset_stats(self) -> None:
        """Zero the server's counts (``POST /stats/reset``)."""
        request = urllib.request.Request(self.url + "/stats/reset", data=b"", method="POST")
        with urllib.request.urlopen(request, timeout=10):
            pass


@contextlib.contextmanager
def running_server(module: str, *args: str) -> Iterator[ServerProcess]:
    """Run ``python -m tests.servers.<module> --port P *args`` for the ``with`` block.

    The process is always continued (it may have been stopped) and terminated at the end.
    """
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", f"tests.servers.{module}", "--port", str(port), *args],
        cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"test server {module} did not start: {line!r}")
        yield ServerProcess(port, process)
    finally:
        if process.stdout is not None:
            process.stdout.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
