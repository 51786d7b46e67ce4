"""Run the example suite against the built-in SGLang emulator.

Starts ``python -m pytest_sglang.emulator`` as a real server process on a free port, runs
``pytest examples --sglang-url=...`` against it, and stops the emulator's whole process
group afterwards (also on Ctrl-C). Extra arguments are passed to pytest::

    python examples/run_against_emulator.py -k identity
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent
MODEL = "Qwen/Qwen3-8B"
CONTEXT_LENGTH = 32768


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main(pytest_args: list[str]) -> int:
    port = free_port()
    log = Path(tempfile.mkdtemp(prefix="sglang-emulator-")) / "server.log"
    emulator = [
        sys.executable,
        "-m",
        "pytest_sglang.emulator",
        "--model-path",
        MODEL,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--context-length",
        str(CONTEXT_LENGTH),
        "--tp",
        "1",
        "--enable-metrics",
    ]
    print(f"emulator: {' '.join(emulator[1:])}\nemulator log: {log}", flush=True)
    with log.open("wb") as log_file:
        server = subprocess.Popen(
            emulator, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        # The emulator loads and warms up like SGLang does: the plugin's readiness gate
        # waits for it, so no sleep or polling here.
        command = [
            sys.executable,
            "-m",
            "pytest",
            str(EXAMPLES),
            "-v",
            "-rA",
            f"--sglang-url=http://127.0.0.1:{port}",
            f"--sglang-expect=model_id={MODEL}",
            f"--sglang-expect=max_model_len={CONTEXT_LENGTH}",
            "--sglang-expect=tp_size=1",
            "--sglang-ready-timeout=60",
            *pytest_args,
        ]
        return subprocess.call(command, cwd=EXAMPLES)
    finally:
        # The emulator runs in its own session: signal the group, so nothing outlives us.
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
