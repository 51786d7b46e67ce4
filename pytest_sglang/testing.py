"""What tests and benchmarks share: the emulator as a real process on a real socket, flag sets."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from pytest_sglang.server.launcher import pick_port
from pytest_sglang.server.process import READY_LINE

#: The story's EAGLE-3 configuration (as in examples/pyproject.toml), for tests and benchmarks.
EAGLE3_FLAGS = tuple(
    "--speculative-algorithm EAGLE3 --speculative-num-steps 3 "
    "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4".split()
)

#: The emulator without its start-up delays and with a 1 ms decode step: tests run fast.
FAST_FLAGS = tuple(
    "--emulator-load-time 0 --emulator-warmup-time 0 --emulator-health-probe-time 0 "
    "--emulator-decode-ms 1".split()
)


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    return pick_port("127.0.0.1")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Return whether something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


@dataclass
class EmulatorProcess:
    """A running emulator: its URL, process and log file."""

    port: int
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        """The emulator's base URL."""
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        """Return the emulator's log so far."""
        return self.log_path.read_text(errors="replace")

    def _wait(self, done: Callable[[], bool], what: str, timeout: float) -> None:
        """Block until ``done()``; fail with the log if the emulator exits or time runs out."""
        deadline = time.monotonic() + timeout
        while not done():
            if self.process.poll() is not None and not done():
                raise RuntimeError(
                    f"emulator exited with {self.process.returncode} before {what}:\n{self.log()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"emulator not {what} after {timeout}s:\n{self.log()}")
            time.sleep(0.02)

    def wait_for_port(self, timeout: float = 30.0) -> None:
        """Block until the port accepts connections; fail with the log if the process dies."""
        self._wait(lambda: port_open(self.port), f"opening port {self.port}", timeout)

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        """Block until ``text`` appears in the emulator's log."""
        self._wait(lambda: text in self.log(), f"logging {text!r}", timeout)

    def stop(self, grace: float = 5.0) -> None:
        """Stop the emulator's whole process group: SIGTERM, then SIGKILL after ``grace``."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(grace)
        # Children that outlived the leader: only processes still in the group we created
        # (once the leader is reaped its pid, hence the group id, could be reused).
        for proc in psutil.process_iter():
            with contextlib.suppress(OSError, psutil.Error):
                if os.getpgid(proc.pid) == self.process.pid:
                    proc.kill()


@contextlib.contextmanager
def running_emulator(
    log_dir: Path,
    *args: str,
    model_path: str = "emulated/Llama-3.1-8B-Instruct",
    wait: str | None = "ready",
    env: dict[str, str] | None = None,
) -> Iterator[EmulatorProcess]:
    """Run ``python -m pytest_sglang.emulator`` on a free port for the ``with`` block.

    ``args`` come after :data:`FAST_FLAGS` (so they win); ``wait`` is ``"ready"`` (the ready
    line is logged), ``"port"`` (port open) or ``None``.
    """
    port = free_port()
    log_path = log_dir / f"emulator-{port}.log"
    argv = [sys.executable, "-m", "pytest_sglang.emulator", "--model-path", model_path]
    argv += ["--host", "127.0.0.1", "--port", str(port), *FAST_FLAGS, *args]
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    emulator = EmulatorProcess(port=port, process=process, log_path=log_path)
    try:
        if wait == "port":
            emulator.wait_for_port()
        elif wait == "ready":
            emulator.wait_for_log(READY_LINE)
        yield emulator
    finally:
        emulator.stop()
