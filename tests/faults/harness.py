"""What the fault matrix shares: inner runs, their report and JUnit times, and leftovers.

Every row of the matrix runs an inner pytest session (pytester) against the emulator with one
fault on, with ``--sglang-report`` and ``--junitxml``, and reads back: the output, the JSON
report, each test's time (JUnit: setup, call and teardown together) and the processes still
running that the plugin started (by pid from the report's launches, and by the model path
unique to the run, which every launched emulator carries on its command line).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

#: The emulator's start-up without waiting (load, warm-up and health probe at 0 s).
FAST = (
    "--emulator-load-time", "0", "--emulator-warmup-time", "0",
    "--emulator-health-probe-time", "0", "--emulator-decode-ms", "1",
)  # fmt: skip


def new_tag() -> str:
    """Return a model-path tag unique to one run (how its processes are found)."""
    return uuid.uuid4().hex[:10]


def write_profile(
    pytester: pytest.Pytester, tag: str, args: Sequence[str] = (), extra: str = ""
) -> None:
    """Write one profile ``srv`` into the inner run's pyproject.toml."""
    quoted = ", ".join(json.dumps(a) for a in (*FAST, *args))
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.srv]
        model-path = "test-{tag}/model"
        args = [{quoted}]
        {extra}
    """)


@dataclass
class Run:
    """An inner run's outcome, as the matrix judges it."""

    result: pytest.RunResult
    report: dict[str, Any]
    #: Seconds per test (JUnit ``time``: setup, call and teardown), by test name.
    times: dict[str, float]
    junit: str
    elapsed: float

    @property
    def output(self) -> str:
        return self.result.stdout.str() + "\n" + self.result.stderr.str()

    def launch(self) -> dict[str, Any]:
        launches = self.report.get("launches", [])
        assert launches, "the report records no launch"
        last: dict[str, Any] = launches[-1]
        return last

    def failures(self) -> list[dict[str, Any]]:
        failures: list[dict[str, Any]] = self.report.get("server_failures", [])
        return failures


def run_inner(pytester: pytest.Pytester, *args: str, subprocess: bool = False) -> Run:
    """Run the inner session with a report and JUnit XML; return what the matrix reads."""
    report = pytester.path / "report.json"
    junit = pytester.path / "junit.xml"
    options = (f"--sglang-report={report}", f"--junitxml={junit}", "-p", "no:cacheprovider")
    started = time.monotonic()
    if subprocess:
        result = pytester.runpytest_subprocess(*options, *args, timeout=300)
    else:
        result = pytester.runpytest(*options, *args)
    elapsed = time.monotonic() - started
    document = json.loads(report.read_text()) if report.exists() else {}
    text = junit.read_text() if junit.exists() else ""
    times: dict[str, float] = {}
    if text:
        for case in ET.fromstring(text).iter("testcase"):
            times[case.get("name", "")] = float(case.get("time", "0"))
    return Run(result, document, times, text, elapsed)


def _ours(proc: psutil.Process, tag: str, pids: set[int]) -> bool:
    try:
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = proc.cmdline()
    except psutil.Error:
        return False
    if any(tag in part for part in cmdline):
        return True
    # The reaper of a launch names the server's pid last.
    return "pytest_sglang.server.process" in cmdline and cmdline[-1:] in ([str(p)] for p in pids)


def leftovers(tag: str, report: dict[str, Any] | None = None, wait: float = 30.0) -> list[str]:
    """Return the processes of this run still alive after ``wait`` seconds (none, we hope).

    Found by pid (the report's launches, their reapers) and by the run's unique model tag.
    """
    launches = (report or {}).get("launches", [])
    pids = {int(launch["pid"]) for launch in launches if launch.get("pid")}
    deadline = time.monotonic() + wait
    while True:
        alive = [
            f"pid {p.pid}: {' '.join(p.cmdline())[:160]}"
            for p in psutil.process_iter()
            if _ours(p, tag, pids)
        ]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


@contextlib.contextmanager
def redirecting_server(location: str) -> Iterator[str]:
    """Serve 307 with ``location`` on every path (an http -> https ingress); yield its URL."""

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(307)
            self.send_header("Location", location + self.path)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


#: An inner conftest that hands the launcher a port somebody else holds: a listener that
#: accepts connections (the kernel completes them) and never answers, bound before the
#: server tries to bind it, as when another job's server takes the port in between. Patched
#: for the inner session only (the launcher module outlives an in-process pytester run).
PORT_THIEF = """
import socket

import pytest

import pytest_sglang.server.launcher as launcher


@pytest.fixture(autouse=True, scope="session")
def _steal_the_port():
    thief = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    thief.bind(("127.0.0.1", 0))
    thief.listen(64)
    port = thief.getsockname()[1]
    patch = pytest.MonkeyPatch()
    patch.setattr(launcher, "pick_port", lambda host: port)
    yield
    patch.undo()
    thief.close()
"""


def emulator_pids(tag: str) -> list[int]:
    """Return the pids of live processes carrying ``tag`` on their command line."""
    return [p.pid for p in psutil.process_iter() if _ours(p, tag, set())]


def listening(tag: str) -> bool:
    """Return whether a live process carrying ``tag`` listens on a TCP port (it is serving)."""
    for pid in emulator_pids(tag):
        with contextlib.suppress(psutil.Error):
            connections = psutil.Process(pid).net_connections(kind="tcp")
            if any(c.status == psutil.CONN_LISTEN for c in connections):
                return True
    return False


def wait_for(predicate: Any, timeout: float, step: float = 0.1) -> bool:
    """Poll ``predicate()`` until true or ``timeout`` seconds pass; return its last value."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def tail(path: Path, lines: int = 40) -> str:
    """Return the last lines of a file, for assertion messages."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""
