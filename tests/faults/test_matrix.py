"""The fault matrix: one end-to-end run per fault, launch and attach where both apply.

Each row turns one fault on (an emulator fault, a hostile endpoint, a stolen port, a killed
process), runs an inner pytest session against it and asserts what a user relies on:

* **the message**: the failure names the cause (exit code, phase, the server's own words,
  a hint);
* **the time to the verdict**: the test fails when the fault strikes, not at a timeout
  that does not apply (JUnit's time of the test that met it);
* **nothing left running**: no process the plugin started survives, by pid (the report's
  launches and their reapers) and by the run's unique model path;
* **the report records what happened**: launches with their outcome and cause, servers
  that failed or died, measurements with their failed requests.

``docs/faults.md`` is this table in words. Rows that need a signal or pytest-timeout (which
end pytest itself) are in ``test_process_faults.py``.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from pytest_sglang.testing import running_emulator
from tests.faults.harness import (
    PORT_THIEF,
    Run,
    leftovers,
    new_tag,
    redirecting_server,
    run_inner,
    wait_for,
    write_profile,
)

pytestmark = pytest.mark.slow

Mode = Literal["launch", "attach"]

#: Two tests that need the server: the first meets the fault, the second must fail at once.
SERVER_SUITE = """
import pytest

pytestmark = pytest.mark.sglang_profile("srv")

def test_first(sglang_server):
    pass

def test_second(sglang_server):
    pass
"""

#: A measurement that meets the fault, then a test that needs the same server.
BENCH_SUITE = """
import pytest
from pytest_sglang import Workload

pytestmark = pytest.mark.sglang_profile("srv")

def test_measure(sglang_bench):
    sglang_bench("srv", Workload(input_len=16, output_len=16, requests=48, warmup=0),
                 concurrency=4, repeats=2)

def test_later(sglang_server):
    pass
"""

#: The server is killed (SIGKILL) in the middle of a measurement: by its pid from the
#: launch record, or (attached) from the environment the outer test sets.
KILL_SUITE = """
import os, signal, threading
import pytest
from pytest_sglang import Workload

pytestmark = pytest.mark.sglang_profile("srv")

def test_measure(sglang_server, sglang_bench):
    pid = sglang_server.launch.pid if sglang_server.launch else int(os.environ["FAULT_PID"])
    threading.Timer(1.0, os.kill, (pid, signal.SIGKILL)).start()
    sglang_bench("srv", Workload(input_len=16, output_len=64, requests=400, warmup=0),
                 concurrency=8, repeats=3)

def test_later(sglang_server):
    pass
"""

#: The server dies between two tests (a crash while nothing measured).
BETWEEN_SUITE = """
import os, signal, time
from urllib.parse import urlsplit
import psutil
import pytest
from pytest_sglang import Workload
from pytest_sglang.testing import port_open

pytestmark = pytest.mark.sglang_profile("srv")

def running(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False

def test_uses_it_then_it_dies(sglang_server):
    pid = sglang_server.launch.pid if sglang_server.launch else int(os.environ["FAULT_PID"])
    os.kill(pid, signal.SIGKILL)
    # Dead, not dying: a process closes its sockets a moment before it has exited.
    port, deadline = urlsplit(sglang_server.url).port, time.monotonic() + 30
    while (port_open(port) or running(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)

def test_second(sglang_server):
    pass

def test_bench_later(sglang_bench):
    sglang_bench("srv", Workload(input_len=4, output_len=4, requests=2), concurrency=1, repeats=1)
"""


@dataclass(frozen=True)
class Row:
    """One fault in one mode, and what a user must see."""

    name: str
    mode: Mode
    suite: str
    #: Emulator flags that turn the fault on (the profile's args, or the attached emulator's).
    emulator: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    outcomes: dict[str, int] = field(default_factory=dict)
    #: fnmatch patterns the output must contain (each on some line).
    message: tuple[str, ...] = ()
    #: The test that meets the fault, and the seconds within which its verdict must come.
    timed: tuple[str, float] = ("", 0.0)
    #: Seconds within which every test after the timed one must fail (at once).
    later: float | None = None
    report: Callable[[Run], None] = lambda run: None
    #: How the attached emulator is started: wait for "ready", "port", or for nothing.
    wait: str | None = "ready"
    conftest: str = ""

    @property
    def id(self) -> str:
        return f"{self.name}-{self.mode}"


def launch_says(outcome: str, cause: str = "") -> Callable[[Run], None]:
    def check(run: Run) -> None:
        launch = run.launch()
        assert launch["outcome"] == outcome, launch
        assert cause in (launch.get("cause") or ""), launch

    return check


def failures_say(error: str, text: str, count: int = 1) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        failures = run.failures()
        assert len(failures) >= count, failures
        assert all(f["error"] == error for f in failures), failures
        assert all(text in f["message"] for f in failures), failures

    return check


def stop_says(key: str, text: str) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        stop = run.launch()["stop"]
        assert any(text in item for item in stop[key]), stop

    return check


def both(*checks: Callable[[Run], None]) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        for one in checks:
            one(run)

    return check


def measured_failures(kind: str) -> Callable[[Run], None]:
    def check(run: Run) -> None:
        (measurement,) = run.report["measurements"]
        assert sum(r["failed"] for r in measurement["runs"]) > 0, measurement["runs"]
        messages = [e["message"] for r in measurement["runs"] for e in r["errors"]]
        assert any(kind in m for m in messages), messages

    return check


DIED_LAUNCHED = "died: exited with code -9 (SIGKILL) while serving"
GONE_ATTACHED = "no longer accepts connections"
READY_3S = ("--sglang-ready-timeout=3",)

ROWS = (
    # -- start-up ------------------------------------------------------------------------
    Row("crash-in-warmup", "launch", SERVER_SUITE, ("--emulator-fault", "crash-in-warmup"),
        outcomes={"errors": 2},
        message=("*SGLang server 'srv' (emulator) exited with code * during phase*",
                 "*Initialization failed. warmup error*",
                 "*hint: the server's warm-up request failed*"),
        timed=("test_first", 15.0), later=1.0,
        report=both(launch_says("failed", "exited with code"),
                    failures_say("ServerExited", "exited with code", 2))),
    Row("crash-in-warmup", "attach", SERVER_SUITE, ("--emulator-fault", "crash-in-warmup"),
        READY_3S, outcomes={"errors": 2}, wait=None,
        message=("*phase 'connect' failed after 3.0*", "*hint: nothing answers at this URL*"),
        timed=("test_first", 3.0 + 5), later=1.0,
        report=failures_say("ServerNotReady", "phase 'connect'", 2)),
    Row("context-length-mismatch", "launch", SERVER_SUITE,
        ("--emulator-fault", "context-length-mismatch"), outcomes={"errors": 2},
        message=("*exited with code -9 (SIGKILL) during phase 'connect'*",
                 "*ValueError: Warning: Target model's context_length (131072) is greater*",
                 "*hint: the draft model's context length is shorter than the target's*"),
        timed=("test_first", 15.0), later=1.0,
        report=launch_says("failed", "exited with code -9")),
    Row("never-ready", "launch", SERVER_SUITE, ("--emulator-fault", "never-ready"), READY_3S,
        outcomes={"errors": 2},
        message=("*phase 'health' failed after 3.0*",
                 "*hint: the server is up but still warming up*",
                 "*log tail*readiness-probe lines left out*"),
        timed=("test_first", 3.0 + 10), later=1.0,
        report=launch_says("failed", "phase 'health' failed")),
    Row("never-ready", "attach", SERVER_SUITE, ("--emulator-fault", "never-ready"), READY_3S,
        outcomes={"errors": 2}, wait="port",
        message=("*phase 'health' failed after 3.0*",
                 "*hint: the server is up but still warming up*"),
        timed=("test_first", 3.0 + 5), later=1.0,
        report=failures_say("ServerNotReady", "phase 'health'", 2)),
    Row("hang", "launch", SERVER_SUITE, ("--emulator-fault", "hang"), READY_3S,
        outcomes={"errors": 2},
        message=("*phase 'connect' failed after 3.0*",
                 "*the port accepts connections but nothing answers*"),
        timed=("test_first", 3.0 + 10), later=1.0,
        report=launch_says("failed", "phase 'connect' failed")),
    Row("hang", "attach", SERVER_SUITE, ("--emulator-fault", "hang"), READY_3S,
        outcomes={"errors": 2}, wait="port",
        message=("*phase 'connect' failed after 3.0*",
                 "*the port accepts connections but nothing answers*"),
        timed=("test_first", 3.0 + 5), later=1.0,
        report=failures_say("ServerNotReady", "phase 'connect'", 2)),
    Row("malformed-models", "launch", SERVER_SUITE, ("--emulator-fault", "malformed-models"),
        outcomes={"errors": 2},
        message=("*phase 'models' failed*breaks the model-list schema*",),
        timed=("test_first", 15.0), later=1.0,
        report=launch_says("failed", "phase 'models' failed")),
    Row("malformed-models", "attach", SERVER_SUITE, ("--emulator-fault", "malformed-models"),
        outcomes={"errors": 2},
        message=("*phase 'models' failed*breaks the model-list schema*",),
        timed=("test_first", 5.0), later=1.0,
        report=failures_say("SchemaMismatch", "phase 'models'", 2)),
    Row("redirect-307", "attach", SERVER_SUITE, outcomes={"errors": 2},
        message=("*GET /ready answered 307 redirecting to https://ingress.example/ready*",),
        timed=("test_first", 5.0), later=1.0,
        report=failures_say("ServerNotReady", "redirecting to https://ingress.example")),
    Row("port-taken", "launch", SERVER_SUITE, outcomes={"errors": 2}, conftest=PORT_THIEF,
        message=("*exited with code 1 during phase 'connect'*",
                 "*address already in use*",
                 "*hint: the port was taken between the plugin picking it and the server's bind*"),
        timed=("test_first", 5.0), later=1.0,
        report=launch_says("failed", "exited with code 1")),
    Row("wrong-api-key", "attach", SERVER_SUITE, ("--api-key", "right-key-0451"),
        ("--sglang-api-key=wrong-key-0451",), outcomes={"errors": 2},
        message=("*401 Unauthorized: the server rejects the API key given*",),
        timed=("test_first", 5.0), later=1.0,
        report=failures_say("ServerNotReady", "401")),
    # -- teardown ------------------------------------------------------------------------
    Row("ignore-sigterm", "launch", SERVER_SUITE, ("--emulator-fault", "ignore-sigterm"),
        outcomes={"passed": 2},
        message=("*srv [[]emulator] stopped: ready in *; stopped in *s; forced: SIGKILL to the "
                 "process group after 15s, SIGTERM was not enough*",
                 "*problem: SGLang server 'srv' (pid *) did not stop on SIGTERM*"),
        timed=("test_second", 30.0),
        report=both(launch_says("stopped"), stop_says("signals", "SIGKILL"))),
    Row("orphan-child", "launch", SERVER_SUITE, ("--emulator-fault", "orphan-child"),
        outcomes={"passed": 2, "errors": 1},
        message=("*found processes of ours that outlived it*killed now: pid*",),
        timed=("test_second", 30.0),
        report=stop_says("stragglers", "pid ")),
    # -- while serving -------------------------------------------------------------------
    Row("error-rate", "launch", BENCH_SUITE, ("--emulator-fault", "error-rate=0.3"),
        outcomes={"failed": 1, "passed": 1},
        message=("*the measurement of srv @ C=4 * is broken: * of * measured requests failed*",
                 "*x HTTP 500*Internal server error: the request failed in the scheduler*",
                 "*allow_errors=0.05*"),
        timed=("test_measure", 20.0),
        report=both(measured_failures("HTTP 500"), launch_says("stopped"))),
    Row("error-rate", "attach", BENCH_SUITE, ("--emulator-fault", "error-rate=0.3"),
        outcomes={"failed": 1, "passed": 1},
        message=("*is broken: * of * measured requests failed*",
                 "*x HTTP 500*Internal server error*"),
        timed=("test_measure", 20.0), report=measured_failures("HTTP 500")),
    Row("stall-stream", "launch", BENCH_SUITE, ("--emulator-fault", "stall-stream=2"),
        ("-osglang_stall_timeout=500ms",), outcomes={"failed": 1, "passed": 1},
        message=("*the measurement of srv @ C=4 * was stopped in run 1: the server stopped "
                 "answering: 8 consecutive transport failures*", "*x stalled: no new token*"),
        timed=("test_measure", 20.0), report=measured_failures("stalled")),
    Row("stall-stream", "attach", BENCH_SUITE, ("--emulator-fault", "stall-stream=2"),
        ("-osglang_stall_timeout=500ms",), outcomes={"failed": 1, "passed": 1},
        message=("*the measurement of srv @ C=4 * was stopped in run 1: the server stopped "
                 "answering: 8 consecutive transport failures*", "*x stalled: no new token*"),
        timed=("test_measure", 20.0), report=measured_failures("stalled")),
    Row("crash-under-load", "launch", BENCH_SUITE, ("--emulator-fault", "crash-under-load=20"),
        outcomes={"failed": 1, "errors": 1},
        message=(f"*SGLang server 'srv' (emulator, pid *) {DIED_LAUNCHED}*",
                 "*RuntimeError: CUDA error: an illegal memory access*",
                 "*hint: the server was killed by SIGKILL*",
                 "*the measurement (srv C=4, run 1) lost * of * requests to it*"),
        timed=("test_measure", 15.0), later=1.0,
        report=both(launch_says("died", "exited with code -9 (SIGKILL) while serving"),
                    failures_say("ServerDied", DIED_LAUNCHED, 2))),
    Row("crash-under-load", "attach", BENCH_SUITE, ("--emulator-fault", "crash-under-load=20"),
        outcomes={"failed": 1, "errors": 1},
        message=(f"*SGLang server 'srv' at http://127.0.0.1:* {GONE_ATTACHED}*",),
        timed=("test_measure", 15.0), later=1.0,
        report=failures_say("ServerDied", GONE_ATTACHED, 2)),
    Row("sigkill-mid-measurement", "launch", KILL_SUITE, outcomes={"failed": 1, "errors": 1},
        message=(f"*{DIED_LAUNCHED}*", "*the measurement (srv C=8, run 1) lost *"),
        timed=("test_measure", 15.0), later=1.0,
        report=both(launch_says("died", "-9 (SIGKILL)"), failures_say("ServerDied", "died", 2))),
    Row("sigkill-mid-measurement", "attach", KILL_SUITE, outcomes={"failed": 1, "errors": 1},
        message=(f"*{GONE_ATTACHED}*",),
        timed=("test_measure", 15.0), later=1.0,
        report=failures_say("ServerDied", GONE_ATTACHED, 2)),
    Row("died-between-tests", "launch", BETWEEN_SUITE,
        outcomes={"passed": 1, "errors": 1, "failed": 1},
        message=(f"*{DIED_LAUNCHED}*found by test_inner.py::test_second*",),
        timed=("test_second", 3.0), later=3.0,
        report=both(launch_says("died", "-9 (SIGKILL)"), failures_say("ServerDied", "died", 2))),
    Row("died-between-tests", "attach", BETWEEN_SUITE,
        outcomes={"passed": 1, "errors": 1, "failed": 1},
        message=(f"*{GONE_ATTACHED}*found by test_inner.py::test_second*",),
        timed=("test_second", 3.0), later=3.0,
        report=failures_say("ServerDied", GONE_ATTACHED, 2)),
)  # fmt: skip


@contextlib.contextmanager
def attached(row: Row, tmp_path: Path, tag: str) -> Iterator[str]:
    """Yield the URL of the attached server of ``row`` (an emulator, or a hostile stand-in)."""
    if row.name == "redirect-307":
        with redirecting_server("https://ingress.example") as url:
            yield url
        return
    with running_emulator(
        tmp_path, *row.emulator, model_path=f"test-{tag}/model", wait=row.wait
    ) as emulator:
        os.environ["FAULT_PID"] = str(emulator.process.pid)
        try:
            if row.wait is None:  # a fault that ends the process: wait until it has
                wait_for(lambda: emulator.process.poll() is not None, 20.0)
            yield emulator.url
        finally:
            os.environ.pop("FAULT_PID", None)


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_fault(row: Row, pytester: pytest.Pytester, tmp_path: Path) -> None:
    tag = new_tag()
    pytester.makepyfile(test_inner=row.suite)
    if row.conftest:
        pytester.makeconftest(row.conftest)
    if row.mode == "launch":
        write_profile(pytester, tag, row.emulator)
        run = run_inner(pytester, "--sglang-launcher=emulator", "-vv", *row.options)
    else:
        with attached(row, tmp_path, tag) as url:
            run = run_inner(pytester, f"--sglang-url=srv={url}", "-vv", *row.options)
    output = run.output
    try:
        run.result.assert_outcomes(**row.outcomes)
        lines = output.splitlines()
        for pattern in row.message:
            assert any(fnmatch.fnmatch(line, pattern) for line in lines), pattern
        test, within = row.timed
        assert run.times.get(test, float("inf")) < within, (test, run.times)
        if row.later is not None:
            names = list(run.times)
            later = [run.times[name] for name in names[names.index(test) + 1 :]]
            assert later and all(t < row.later for t in later), run.times
        assert run.report, "no JSON report written"
        assert run.report["complete"] is True
        row.report(run)
    except BaseException:
        sys.stderr.write(output[-12000:])
        raise
    finally:
        left = leftovers(tag, run.report)
    assert left == [], f"left running: {left}"


def test_every_row_has_a_line_in_the_docs() -> None:
    docs = Path(__file__).parents[2].joinpath("docs", "faults.md").read_text()
    for row in ROWS:
        assert f"`{row.name}`" in docs, f"{row.name} is not documented in docs/faults.md"


def test_report_of_a_row_validates(pytester: pytest.Pytester) -> None:
    # The report a fault leaves behind still validates against the shipped schema.
    from pytest_sglang.server.schemas import violations

    tag = new_tag()
    write_profile(pytester, tag, ("--emulator-fault", "crash-in-warmup"))
    pytester.makepyfile(test_inner=SERVER_SUITE)
    run = run_inner(pytester, "--sglang-launcher=emulator")
    assert violations(run.report, "report") == []
    assert json.dumps(run.report)  # plain JSON types
    assert leftovers(tag, run.report) == []
