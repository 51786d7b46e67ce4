"""Ctrl-C and SIGTERM in the middle of a measurement: what finished is kept, what we started stops.

Each test runs pytest as a child process that launches an emulator and measures 3 runs of 4
requests at C=1 (no warm-up), and signals the child at a point read from the emulator's
access log, never after a sleep: when the log shows the second request of run 2 (its sixth
``POST /generate``), run 1 has finished and run 2 is under way. The child must end with
pytest's ``INTERRUPTED`` status, every output it was asked for written with run 1 in it and
the measurement marked as cut, the launch recorded as stopped, and no process of ours left.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import psutil
import pytest

from pytest_sglang.testing import EmulatorProcess
from tests.faults.harness import new_tag, wait_for, write_profile
from tests.faults.test_process_faults import finish, start_pytest

pytestmark = pytest.mark.slow

MEASURE = """
from pytest_sglang import Workload

def test_measure(sglang_bench):
    sglang_bench("srv", Workload(input_len=8, output_len=40, requests=4, warmup=0), 1, repeats=3)
"""
DECLARED = """
import pytest
from pytest_sglang import Workload

W = Workload(input_len=8, output_len=40, requests=4, warmup=0)

@pytest.mark.sglang_measure("srv", workload=W, concurrency=[1, 2], repeats=1)
def test_sweep(sglang_bench):
    sglang_bench("srv", W, [1, 2], repeats=1)
"""
PAIR = """
from pytest_sglang import Workload

def test_pair(sglang_bench):
    sglang_bench.pair("a", "b", Workload(input_len=8, output_len=40, requests=4, warmup=0), 1,
                      repeats=3)
"""
WORKERS = """
from pytest_sglang import Workload

def test_workers(sglang_bench):
    sglang_bench("srv", Workload(input_len=8, output_len=40, requests=40, warmup=0), 2)
"""
#: Each token takes 20 ms: a request about 0.8 s, so the signal lands inside run 2 even when
#: the machine is slow to deliver it (run 2 has two more requests to go).
SLOW_DECODE = ("--emulator-decode-ms", "20")
#: The POST that starts the second request of run 2 (4 per run, no warm-up).
RUN_2_REQUEST_2 = 6


def _posts(log: Path) -> int:
    """Count the requests the emulator's access log shows it received."""
    try:
        return log.read_text(errors="replace").count('"POST /generate')
    except FileNotFoundError:
        return 0


def _start(pytester: pytest.Pytester, tag: str, *args: str) -> tuple[subprocess.Popen[str], Path]:
    """Start the child pytest with every output; return it and its server's log."""
    basetemp = pytester.path / "basetemp"
    process = start_pytest(
        pytester.path, f"--basetemp={basetemp}", "--sglang-report=r.json",
        "--sglang-markdown=s.md", "--junitxml=j.xml", "--sglang-save=cut", "-p", "no:randomly",
        *args,
    )  # fmt: skip
    return process, basetemp / "sglang-logs" / "srv-1.log"


def _signal_at(process: subprocess.Popen[str], log: Path, posts: int, signum: int) -> None:
    """Send ``signum`` once the server has received ``posts`` requests."""
    reached = wait_for(lambda: _posts(log) >= posts or process.poll() is not None, 120.0)
    assert reached and process.poll() is None, f"the child ended first ({_posts(log)} requests)"
    process.send_signal(signum)


def _report(pytester: pytest.Pytester) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((pytester.path / "r.json").read_text())
    return document


def _assert_launch_stopped(document: dict[str, Any]) -> dict[str, Any]:
    (launch,) = document["launches"]
    assert launch["outcome"] == "stopped", launch
    assert launch["stop"] is not None and launch["stop"]["stopped_at"], launch
    stop: dict[str, Any] = launch["stop"]
    return stop


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_in_run_2_keeps_run_1_in_every_output(
    pytester: pytest.Pytester, signum: int
) -> None:
    tag = new_tag()
    write_profile(pytester, tag, SLOW_DECODE)
    pytester.makepyfile(test_inner=MEASURE)
    process, log = _start(pytester, tag)
    try:
        _signal_at(process, log, RUN_2_REQUEST_2, signum)
    finally:
        output = finish(process, tag)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-4000:]
    document = _report(pytester)
    assert document["interrupted"] is True and document["complete"] is False
    (measurement,) = document["measurements"]
    assert measurement["test"] == "test_inner.py::test_measure"
    assert "KeyboardInterrupt" in measurement["cut"] and "in run 2 of 3" in measurement["cut"]
    assert measurement["finished_runs"] == 1
    assert measurement["runs"][0]["completed"] == 4, measurement["runs"][0]
    _assert_launch_stopped(document)
    # The Markdown summary, JUnit's properties and the saved baseline carry it too.
    markdown = (pytester.path / "s.md").read_text()
    assert "srv (cut)" in markdown and "The run was interrupted" in markdown
    (case,) = ET.parse(pytester.path / "j.xml").getroot().iter("testcase")
    properties = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert properties["sglang.srv.c1.runs"] in ("1", "2"), properties
    assert "in run 2 of 3" in (properties.get("sglang.srv.c1.cut") or ""), properties
    failure = case.find("failure")
    assert failure is not None and "interrupted" in (failure.get("message") or ""), output
    (saved,) = (pytester.path / ".benchmarks").rglob("*_cut.json")
    stored = json.loads(saved.read_text())
    record = stored["benchmarks"][0]["options"]["sglang"]
    assert record["labels"]["interrupted"] is True
    assert record["measurement"]["runs"][0]["completed"] == 4
    assert "in run 2 of 3" in record["measurement"]["cut"]


def test_an_interrupt_with_load_workers_keeps_the_requests_they_handed_over(
    pytester: pytest.Pytester,
) -> None:
    # Two worker processes (about 16 s of requests); the signal comes once the measurement's
    # line (every 10 s off a terminal) shows requests the coordinator has received.
    tag = new_tag()
    write_profile(pytester, tag, SLOW_DECODE)
    pytester.makepyfile(test_inner=WORKERS)
    process, _ = _start(pytester, tag, "-o", "sglang_load_workers=2")
    stdout = process.stdout
    assert stdout is not None
    lines: list[str] = []

    def read() -> None:
        for text in stdout:
            lines.append(text)  # noqa: PERF402 - a line at a time, as the child writes

    reader = threading.Thread(target=read)
    reader.start()
    line = re.compile(r"sglang: measuring srv .*: (\d+)/40 requests")

    def handed_over() -> int:
        return max((int(m[1]) for text in list(lines) if (m := line.search(text))), default=0)

    try:
        reached = wait_for(lambda: handed_over() > 0 or process.poll() is not None, 120.0)
        assert reached and process.poll() is None, "".join(lines)[-4000:]
        workers = [
            child
            for child in psutil.Process(process.pid).children()
            if any("spawn_main" in part for part in child.cmdline())
        ]
        received = handed_over()
        process.send_signal(signal.SIGINT)
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=90)  # the reader has its output; finish checks leftovers
        finish(process, tag)
        reader.join(timeout=30)
    output = "".join(lines)[-4000:]
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output
    assert len(workers) == 2 and not any(w.is_running() for w in workers), output
    (measurement,) = _report(pytester)["measurements"]
    assert "KeyboardInterrupt" in measurement["cut"] and measurement["finished_runs"] == 0
    (run,) = measurement["runs"]
    assert received <= run["completed"] < 40 and run["failed"] == 0, run


def test_an_interrupt_during_declared_measurements_keeps_those_taken(
    pytester: pytest.Pytester,
) -> None:
    # Declared measurements are taken right after the launch, for tests that have not run
    # yet: C=1 (4 requests) finishes, C=2 is cut. Neither was recorded by a test.
    tag = new_tag()
    write_profile(pytester, tag, SLOW_DECODE)
    pytester.makepyfile(test_inner=DECLARED)
    process, log = _start(pytester, tag)
    try:
        _signal_at(process, log, RUN_2_REQUEST_2, signal.SIGINT)
    finally:
        output = finish(process, tag)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-4000:]
    measurements = {m["concurrency"]: m for m in _report(pytester)["measurements"]}
    assert set(measurements) == {1, 2}, output[-4000:]
    assert "cut" not in measurements[1] and measurements[1]["runs"][0]["completed"] == 4
    assert "KeyboardInterrupt" in measurements[2]["cut"]


def test_a_second_ctrl_c_ends_quietly_and_still_stops_the_server(
    pytester: pytest.Pytester,
) -> None:
    # The server ignores SIGTERM: stopping it takes the 15 s grace period, and the second
    # Ctrl-C lands there (the emulator logs the SIGTERM it ignored).
    tag = new_tag()
    write_profile(pytester, tag, (*SLOW_DECODE, "--emulator-fault", "ignore-sigterm"))
    pytester.makepyfile(test_inner=MEASURE)
    process, log = _start(pytester, tag)
    try:
        _signal_at(process, log, RUN_2_REQUEST_2, signal.SIGINT)
        ignored = wait_for(
            lambda: (
                "Received SIGTERM; ignoring it" in log.read_text(errors="replace")
                or process.poll() is not None
            ),
            60.0,
        )
        assert ignored and process.poll() is None, "the child ended before the second Ctrl-C"
        process.send_signal(signal.SIGINT)
    finally:
        output = finish(process, tag)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    document = _report(pytester)
    (measurement,) = document["measurements"]
    assert measurement["runs"][0]["completed"] == 4
    stop = _assert_launch_stopped(document)
    assert any("interrupted again" in sent for sent in stop["signals"]), stop


def test_an_interrupt_in_an_interleaved_pair_keeps_both_sides_finished_runs(
    pytester: pytest.Pytester, start_emulator: Callable[..., EmulatorProcess]
) -> None:
    # Two attached servers, runs interleaved A B A B: the interrupt lands in A's run 2.
    a, b = (start_emulator(*SLOW_DECODE) for _ in range(2))
    pytester.makepyfile(test_inner=PAIR)
    basetemp = pytester.path / "basetemp"
    process = start_pytest(
        pytester.path, f"--basetemp={basetemp}", "--sglang-report=r.json",
        f"--sglang-url=a={a.url}", f"--sglang-url=b={b.url}",
    )  # fmt: skip
    try:
        _signal_at(process, a.log_path, RUN_2_REQUEST_2, signal.SIGINT)
        output, _ = process.communicate(timeout=90)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-4000:]
    measurements = {m["server"]: m for m in _report(pytester)["measurements"]}
    assert set(measurements) == {"a", "b"}, output[-4000:]
    assert all(m["schedule"] == "interleaved" for m in measurements.values())
    assert "in run 2 of 3" in measurements["a"]["cut"] and measurements["a"]["finished_runs"] == 1
    assert measurements["b"]["finished_runs"] == 1 and len(measurements["b"]["runs"]) == 1
    assert measurements["b"]["runs"][0]["completed"] == 4


def test_sigterm_is_ours_for_the_session_only(pytester: pytest.Pytester) -> None:
    # An in-process session: the handler of the process that ran it is back afterwards.
    def before(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("not called")

    pytester.makepyfile(
        test_inner="""
        import signal

        def test_handler():
            assert signal.getsignal(signal.SIGTERM).__qualname__ == "SessionInterrupts._on_sigterm"
    """
    )
    previous = signal.signal(signal.SIGTERM, before)
    try:
        result = pytester.runpytest()
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, previous)
    result.assert_outcomes(passed=1)
