"""Progress in a CI log (issue 17): launch and measurement lines arrive while they are news.

A CI runner's log is a pipe, not a TTY. The inner session runs as a subprocess whose output
is such a pipe; the outer test reads it line by line and, once it has seen the progress line,
creates a file the inner test waits for. A line held back in a buffer until the end would
never arrive in time: the inner test fails after its wait, so nothing here depends on timing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.faults.harness import leftovers, new_tag

pytestmark = pytest.mark.slow

#: The inner test waits this long for the outer test to have seen the line.
WAIT = 60

HANDSHAKE = """
import pathlib, time

def wait_for_the_reader():
    deadline = time.monotonic() + {wait}
    while not pathlib.Path("seen").exists():
        assert time.monotonic() < deadline, "the progress line did not reach the pipe in time"
        time.sleep(0.05)
"""


def _run_until_seen(cwd: Path, args: list[str], wanted: str) -> tuple[int, str]:
    """Run pytest in ``cwd``; create ``seen`` once a line containing ``wanted`` came out."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env.pop("PYTHONUNBUFFERED", None)  # the pipe's own buffering is what is under test
    lines: list[str] = []
    with subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    ) as process:  # fmt: skip

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if wanted in line:
                    (cwd / "seen").touch()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            code = process.wait(timeout=240)
        finally:
            process.kill()
        reader.join(10)
    return code, "".join(lines)


@pytest.mark.parametrize("xdist", [False, True], ids=["one process", "xdist worker"])
def test_a_slow_launch_reports_progress_to_a_pipe(pytester: pytest.Pytester, xdist: bool) -> None:
    if xdist:
        pytest.importorskip("xdist")
    tag = new_tag()
    # The launcher's first progress line comes 0.5 s into a launch here (5 s by default, set
    # by the inner conftest): this server loads for 3.
    pytester.makeconftest(
        "import pytest_sglang.server.launcher as launcher\n\nlauncher.PROGRESS_FIRST = 0.5\n"
    )
    args = ["--emulator-load-time", "3", "--emulator-warmup-time", "0",
            "--emulator-health-probe-time", "0", "--emulator-decode-ms", "1"]  # fmt: skip
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.slow]
        model-path = "test-{tag}/slow"
        args = [{", ".join(json.dumps(a) for a in args)}]
    """)
    pytester.makepyfile(
        HANDSHAKE.format(wait=WAIT)
        + """
import pytest

@pytest.mark.sglang_profile("slow")
def test_up(sglang_server):
    wait_for_the_reader()
"""
    )
    # Under -n 2 the emulator, which holds no GPU, is launched by the worker that runs the test.
    workers = ["-n", "2", "-p", "no:benchmark"] if xdist else []
    code, out = _run_until_seen(
        pytester.path,
        ["--sglang-launcher=emulator", "--sglang-report=r.json", *workers],
        "sglang: launching 'slow' (emulator): phase",
    )
    assert code == 0, out
    assert "1 passed" in out
    said = [line for line in out.splitlines() if "sglang: launching 'slow'" in line]
    assert said and all(line.startswith(("[gw0] ", "[gw1] ")) == xdist for line in said), said
    document = json.loads((pytester.path / "r.json").read_text())
    assert leftovers(tag, document) == []


def test_an_xdist_worker_reports_progress_to_the_controllers_log(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(
        HANDSHAKE.format(wait=WAIT)
        + """
from pytest_sglang.report.progress import progress_writer

def test_reports(request):
    progress_writer(request.config)("sglang: measuring x C=1 run 1/1: 3/8 requests")
    wait_for_the_reader()

def test_other():
    pass
"""
    )
    code, out = _run_until_seen(
        pytester.path, ["-n", "2", "-p", "no:benchmark"], "] sglang: measuring x C=1 run 1/1"
    )
    assert code == 0, out
    # Said once, by the worker that ran the test, named.
    said = [line for line in out.splitlines() if "sglang: measuring x" in line]
    assert len(said) == 1 and said[0].startswith(("[gw0] ", "[gw1] ")), said
