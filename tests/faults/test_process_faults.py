"""Rows of the fault matrix that end pytest itself: pytest-timeout, Ctrl-C, SIGKILL.

Each runs pytest as a child process against a profile whose server warms up for two
minutes, lets the launch reach its warm-up, then ends pytest the way the row says, and
asserts that nothing the plugin started is left running (the server, found by its unique
model path, and its reaper). A launch runs outside the tests' pytest-timeout
(``pytest_sglang/timeouts.py``), so the timeout row strikes in the test body, with the
server up. ``docs/faults.md`` lists them with the others.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.faults.harness import leftovers, listening, new_tag, wait_for, write_profile

pytestmark = pytest.mark.slow

SLOW_WARMUP = ("--emulator-warmup-time", "120")
ONE_TEST = "import pytest\n\n@pytest.mark.sglang_profile('srv')\ndef test_a(sglang_server): pass\n"
#: The child restores the default SIGINT handler first: started as a background job of a
#: non-interactive shell, this suite (and so the child) may have SIGINT ignored, and Python
#: then installs no KeyboardInterrupt handler.
PYTEST = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "import pytest; sys.exit(pytest.main(sys.argv[1:]))"
)


def start_pytest(cwd: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PYTEST, "--sglang-launcher=emulator", "-p", "no:cacheprovider",
         *args],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], tag: str) -> str:
    """Collect the child's output; never leave it (or what it started) to the next test."""
    try:
        output, _ = process.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate(timeout=30)
        output += "\n(pytest child killed: it did not end within 90 s)"
    left = leftovers(tag, wait=30.0)
    assert left == [], f"left running: {left}\n{output[-4000:]}"
    return output


@pytest.mark.parametrize("method", ["thread", "signal"])
def test_pytest_timeout_with_a_launched_server_leaves_nothing(
    pytester: pytest.Pytester, method: str
) -> None:
    # The 3 s warm-up is the launch's (outside the 2 s timeout); the test then hangs and the
    # timeout strikes with the server up. The thread method ends pytest at once (os._exit):
    # the reaper stops the server; the signal method fails the test and teardown stops it.
    tag = new_tag()
    write_profile(pytester, tag, ("--emulator-warmup-time", "3"))
    pytester.makepyfile(
        test_inner="import time\n\nimport pytest\n\n@pytest.mark.sglang_profile('srv')\n"
        "def test_a(sglang_server): time.sleep(120)\n"
    )
    started = time.monotonic()
    process = start_pytest(pytester.path, "--timeout=2", f"--timeout-method={method}")
    output = finish(process, tag)
    assert "Timeout" in output, output[-4000:]
    assert "ready in" in output, output[-4000:]  # the launch finished first
    assert time.monotonic() - started < 60


def test_sigint_during_warmup_stops_the_server(pytester: pytest.Pytester) -> None:
    tag = new_tag()
    write_profile(pytester, tag, SLOW_WARMUP)
    pytester.makepyfile(test_inner=ONE_TEST)
    process = start_pytest(pytester.path, f"--sglang-report={pytester.path / 'r.json'}")
    try:
        # Into the warm-up: port open, health 503.
        assert wait_for(lambda: listening(tag), 60.0), "the server never opened its port"
        process.send_signal(signal.SIGINT)
    finally:
        output = finish(process, tag)
    assert process.returncode == pytest.ExitCode.INTERRUPTED, output[-4000:]
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["interrupted"] is True
    # Stopped, not failed: the launch was cut short, and its stop is on record.
    (launch,) = report["launches"]
    assert launch["outcome"] == "stopped", launch
    assert launch["cause"] == "interrupted while starting (KeyboardInterrupt)", launch
    assert launch["stop"]["stopped_at"], launch


def test_sigkill_of_pytest_during_warmup_is_cleaned_up_by_the_reaper(
    pytester: pytest.Pytester,
) -> None:
    tag = new_tag()
    write_profile(pytester, tag, SLOW_WARMUP)
    pytester.makepyfile(test_inner=ONE_TEST)
    process = start_pytest(pytester.path)
    try:
        assert wait_for(lambda: listening(tag), 60.0), "the server never opened its port"
        process.kill()  # no teardown runs: the reaper sees its pipe close
    finally:
        finish(process, tag)
