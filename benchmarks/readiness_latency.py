"""Benchmark: readiness-detection latency, emulator ready -> ``sglang_server`` returns.

Each trial runs a one-test pytest session whose server is the emulator (a real process: port
closed while "loading", health 503 while warming up), attached (started by the benchmark,
``--sglang-url``) or launched (a profile, ``--sglang-launcher=emulator``), and compares two
instants on this machine's clock:

* *ready*: the first 200 from ``/ready`` seen by a side poller probing every 2 ms (launched:
  at the URL the emulator's log names);
* *returned*: the moment the test body starts, i.e. the ``sglang_server`` fixture returned.

The gate confirms ``/ready`` with one ``/health_generate``, which on a real server takes
about 1 s by itself (it runs a one-token generation). The benchmark therefore runs with the
emulator's health probe at 0 s (the gate's own latency) and at 1 s (as on SGLang), and prints
the median of each; the target, gate latency beyond the successful probe, is <= 0.1 s.

The emulator is ready 2 s after it starts (``--warm-up`` 1.5 s after its port opens); a
pytest session that takes longer than that to reach the fixture (a loaded machine) would
measure its own start-up instead: raise ``--warm-up`` there.

    python benchmarks/readiness_latency.py [--trials 7] [--mode attached|launched|both]
        [--warm-up 1.5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

TEST = """
import time
import pytest

@pytest.mark.sglang_profile("bench")
def test_ready(sglang_server):
    with open({out!r}, "w") as f:
        f.write(repr(time.time()))
"""
WARM_UP = 1.5
PROFILE = """
[tool.pytest-sglang.profiles.bench]
model-path = "bench/model"
args = {args}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def poll_ready(url: str | Path, stop: threading.Event, found: list[float]) -> None:
    if isinstance(url, Path):  # a launch's log: the emulator names its URL there
        while not stop.is_set():
            named = re.search(r"Uvicorn running on (http://\S+)", read(url))
            if named:
                url = named.group(1)
                break
            time.sleep(0.002)
        else:
            return
    with httpx.Client(timeout=1.0) as client:
        while not stop.is_set():
            try:
                if client.get(f"{url}/ready").status_code == 200:
                    found.append(time.time())
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.002)


def read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def trial(
    workdir: Path, probe_time: float, mode: str, warm_up: float = WARM_UP
) -> tuple[float, float]:
    timings = [
        "--emulator-load-time",
        "0.5",
        "--emulator-warmup-time",
        str(warm_up),
        "--emulator-health-probe-time",
        str(probe_time),
    ]
    port = free_port()
    workdir = workdir / f"trial-{port}"
    workdir.mkdir()
    out = workdir / "returned"
    (workdir / "test_ready.py").write_text(TEST.format(out=str(out)))
    emulator = None
    if mode == "attached":
        url: str | Path = f"http://127.0.0.1:{port}"
        server = [f"--sglang-url=bench={url}"]
        emulator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_sglang.emulator",
                "--model-path",
                "bench/model",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *timings,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    else:
        basetemp = workdir / "basetemp"
        url = basetemp / "sglang-logs" / "bench-1.log"
        server = ["--sglang-launcher=emulator", f"--basetemp={basetemp}"]
        (workdir / "pyproject.toml").write_text(PROFILE.format(args=json.dumps(timings)))
    stop, found = threading.Event(), list[float]()
    poller = threading.Thread(target=poll_ready, args=(url, stop, found))
    poller.start()
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                *server,
                "--sglang-ready-timeout=60",
                "--sglang-require",
                str(workdir / "test_ready.py"),
            ],
            cwd=workdir,
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise SystemExit(f"pytest failed:\n{result.stdout}{result.stderr}")
        poller.join(10)
        returned = float(out.read_text())
        return found[0], returned
    finally:
        stop.set()
        if emulator is not None:
            os.killpg(emulator.pid, signal.SIGTERM)
            emulator.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=7, help="trials per setting (default 7)")
    parser.add_argument(
        "--mode", choices=("attached", "launched", "both"), default="both", help="default both"
    )
    parser.add_argument(
        "--warm-up", type=float, default=WARM_UP, help=f"emulator warm-up s (default {WARM_UP})"
    )
    args = parser.parse_args()
    modes = ("attached", "launched") if args.mode == "both" else (args.mode,)
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            for probe_time in (0.0, 1.0):
                latencies = []
                for _ in range(args.trials):
                    ready, returned = trial(Path(tmp), probe_time, mode, args.warm_up)
                    latencies.append(returned - ready)
                gate_only = statistics.median(latencies) - probe_time
                print(
                    f"{mode}, health probe {probe_time:.1f}s: ready -> fixture returned, median "
                    f"{statistics.median(latencies):.3f}s (min {min(latencies):.3f}s, max "
                    f"{max(latencies):.3f}s, n={args.trials}); beyond the probe: "
                    f"{gate_only:.3f}s (target <= 0.1s)"
                )


if __name__ == "__main__":
    main()
