"""Launch mode end to end, with the emulator launcher: economy, failures, teardown, GPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from pytest_sglang.gpu.probes import write_fake_gpus
from pytest_sglang.testing import EmulatorProcess
from tests.faults.harness import listening, wait_for

pytestmark = pytest.mark.slow

FAST = (
    '"--emulator-load-time", "0", "--emulator-warmup-time", "0", '
    '"--emulator-health-probe-time", "0", "--emulator-decode-ms", "1"'
)


def profiles(pytester: pytest.Pytester, extra: str = "", baseline_args: str = "") -> str:
    """Write two profiles into pyproject.toml; return a model tag unique to this test."""
    tag = uuid.uuid4().hex[:8]
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.baseline]
        model-path = "test-{tag}/model"
        args = [{FAST}{baseline_args}]

        [tool.pytest-sglang.profiles.eagle3]
        extends = "baseline"
        args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
        expect = {{ speculative_algorithm = "EAGLE3", max_running_requests = 48 }}
        {extra}
    """)
    return tag


def emulators(tag: str) -> list[psutil.Process]:
    """Return live emulator processes started for this test (by their unique model path)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(tag in part for part in cmdline):
            found.append(proc)
    return found


INTERLEAVED = """
import pytest

@pytest.mark.sglang_profile("baseline")
def test_b1(sglang_server): assert sglang_server.server_info["speculative_algorithm"] is None

@pytest.mark.sglang_profile("eagle3")
def test_e1(sglang_server): assert sglang_server.server_info["speculative_algorithm"] == "EAGLE3"

@pytest.mark.sglang_profile("baseline")
def test_b2(sglang_server): assert sglang_server.launch.profile == "baseline"

@pytest.mark.sglang_profile("eagle3")
def test_e2(sglang_server): assert sglang_server.launch.profile == "eagle3"

@pytest.mark.sglang_profile("baseline")
def test_b3(sglang_client): assert sglang_client.get("/health").status_code == 200

@pytest.mark.sglang_profile("eagle3")
def test_e3(sglang_client): assert sglang_client.get("/health").status_code == 200
"""


def test_interleaved_profiles_launch_each_server_once(pytester: pytest.Pytester) -> None:
    tag = profiles(pytester)
    pytester.makepyfile(INTERLEAVED)
    result = pytester.runpytest("--sglang-launcher=emulator", "-v")
    result.assert_outcomes(passed=6)
    # Grouped by profile, stable within each group.
    order = [line.split("::")[1].split()[0] for line in result.stdout.lines if " PASSED" in line]
    assert order == ["test_b1", "test_b2", "test_b3", "test_e1", "test_e2", "test_e3"]
    result.stdout.fnmatch_lines([
        "*= sglang launches =*",
        "2 server launches:",
        "  baseline [[]emulator] stopped: ready in *s (connect *, health *, models *, identity *, "
        "server_info *); stopped in *s",
        "  eagle3 [[]emulator] stopped: ready in *",
    ])  # fmt: skip
    assert emulators(tag) == []


def test_launch_failure_is_not_retried_and_names_hint(pytester: pytest.Pytester) -> None:
    tag = profiles(pytester, baseline_args=', "--emulator-fault", "context-length-mismatch"')
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sglang_profile("baseline")
        def test_a(sglang_server): pass

        @pytest.mark.sglang_profile("baseline")
        def test_b(sglang_server): pass
    """)
    start = time.monotonic()
    result = pytester.runpytest("--sglang-launcher=emulator", "--durations=2", "-vv")
    elapsed = time.monotonic() - start
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines([
        "*SGLang server 'baseline' (emulator) exited with code * during phase 'connect'*",
        "*log tail*",
        "*is greater than the derived context_length*",
        "*hint: the draft model's context length is shorter than the target's*"
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1*",
    ])  # fmt: skip
    result.stdout.fnmatch_lines(["*it is not tried again*"])
    assert "1 server launch:" in result.stdout.str()
    assert elapsed < 60
    assert emulators(tag) == []


def test_failure_within_seconds_of_exit(pytester: pytest.Pytester) -> None:
    # The emulator loads for 2 s, then dies: the failure must follow the exit, not the
    # 600 s ready timeout.
    profiles(pytester, baseline_args=', "--emulator-fault", "context-length-mismatch", '
             '"--emulator-load-time", "2"')  # fmt: skip
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    result = pytester.runpytest("--sglang-launcher=emulator", "--durations=1", "-vv")
    result.assert_outcomes(errors=1)
    setup = next(line for line in result.stdout.lines if "s setup " in line)
    assert float(setup.split("s", 1)[0]) < 10, setup


DYING_UNSEEN = """
import pytest
from pytest_sglang.server.process import ServerProcess

@pytest.fixture(autouse=True, scope="session")
def _never_seen_listening():
    # The moment a dying server has closed its port but not yet exited, stretched to always.
    patch = pytest.MonkeyPatch()
    patch.setattr(ServerProcess, "listens_on", lambda self, port: False)
    yield
    patch.undo()
"""


def test_a_server_dying_as_its_port_is_checked_is_reported_as_its_exit(
    pytester: pytest.Pytester,
) -> None:
    # The warm-up fails after the port answered: the server closes its socket, then exits.
    # Checked in between, the port has no listener of ours; that is its death, not a thief.
    tag = profiles(pytester, baseline_args=', "--emulator-fault", "crash-in-warmup"')
    pytester.makeconftest(DYING_UNSEEN)
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    result = pytester.runpytest("--sglang-launcher=emulator")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*SGLang server 'baseline' (emulator) exited with code *"])
    result.stdout.no_fnmatch_line("*another server took the port*")
    assert emulators(tag) == []


TAKEN_PORT = """
import pytest
from pytest_sglang.server import launcher

@pytest.fixture(autouse=True, scope="session")
def _taken_port():
    patch = pytest.MonkeyPatch()
    patch.setattr(launcher, "pick_port", lambda host: {port})
    yield
    patch.undo()
"""


def test_a_port_answered_by_another_server_fails_while_ours_loads(
    pytester: pytest.Pytester, start_emulator: Callable[..., EmulatorProcess]
) -> None:
    # Somebody else's server took the port between our check and our server's bind, and it
    # warms up for ever: its first answer is not ours, found at once, not at the timeout.
    foreign = start_emulator("--emulator-fault", "never-ready", wait="port")
    tag = profiles(pytester, baseline_args=', "--emulator-load-time", "60"')
    pytester.makeconftest(TAKEN_PORT.format(port=foreign.port))
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    start = time.monotonic()
    result = pytester.runpytest("--sglang-launcher=emulator", "--sglang-ready-timeout=40")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [f"*no process we started listens on port {foreign.port}: another server took the port*"]
    )
    assert time.monotonic() - start < 30
    assert emulators(tag) == []


def test_sigint_while_warming_up_leaves_no_process(pytester: pytest.Pytester) -> None:
    tag = profiles(pytester, baseline_args=', "--emulator-warmup-time", "120"')
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    process = sigint_able_pytest(pytester.path, "--sglang-launcher=emulator")
    try:
        deadline = time.monotonic() + 60
        while not emulators(tag) and time.monotonic() < deadline:
            time.sleep(0.1)
        server = emulators(tag)
        assert server, "the emulator never started"
        # Let it reach the warm-up phase (port open, health 503).
        time.sleep(1.5)
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=60)
        assert process.returncode == pytest.ExitCode.INTERRUPTED, output.decode()
        _gone, alive = psutil.wait_procs(server, timeout=10)
        assert not alive, f"left alive: {alive}"
        assert emulators(tag) == []
    finally:
        stop_child(process, tag)


def sigint_able_pytest(cwd: Path, *args: str) -> subprocess.Popen[bytes]:
    """Start pytest in a child that handles SIGINT as an interactive one would.

    Run as a background job of a non-interactive shell, this process (and so its children)
    may have SIGINT ignored, and Python then installs no KeyboardInterrupt handler: the
    signal would be lost. The child restores the default handler before pytest starts.
    """
    code = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "import pytest; sys.exit(pytest.main(sys.argv[1:]))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, *args, "-p", "no:cacheprovider"],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def stop_child(process: subprocess.Popen[bytes], tag: str) -> None:
    """Never leak into the next test: kill our pytest child if it still runs.

    Then wait (bounded) for its reaper to stop the server it launched.
    """
    if process.poll() is None:
        process.kill()
        process.communicate(timeout=30)
    deadline = time.monotonic() + 30
    while emulators(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    if process.stdout is not None:
        process.stdout.close()


def test_sigint_reaches_pytest_even_when_inherited_as_ignored(pytester: pytest.Pytester) -> None:
    # Issue 18: as a background job of a non-interactive shell SIGINT is ignored and
    # inherited; the test above must not depend on how the suite itself was started.
    tag = profiles(pytester, baseline_args=', "--emulator-warmup-time", "120"')
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process = sigint_able_pytest(pytester.path, "--sglang-launcher=emulator")
    finally:
        signal.signal(signal.SIGINT, previous)
    try:
        # Into the warm-up: port open, health 503.
        assert wait_for(lambda: listening(tag), 60.0), "the emulator never opened its port"
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
        assert process.returncode == pytest.ExitCode.INTERRUPTED
    finally:
        stop_child(process, tag)
    assert emulators(tag) == []


def test_gpu_hygiene_end_to_end_with_fake_gpus(pytester: pytest.Pytester, tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    uuids = write_fake_gpus(gpus, 2)
    tag = profiles(pytester)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sglang_profile("baseline")
        def test_holds_gpu(sglang_server, sglang_gpu):
            snap = sglang_gpu.snapshot()
            held = [p for p in snap.processes if p.pid == sglang_server.launch.pid]
            assert held and snap.gpus[0].memory_used > 0
            assert sglang_server.launch.gpus == (snap.gpus[0].uuid,)
    """)
    result = pytester.runpytest(
        "--sglang-launcher=emulator", f"-osglang_gpu_fake={gpus}", "--sglang-report=r.json"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*baseline*stopped*GPU memory released in *s*"])
    report = json.loads((pytester.path / "r.json").read_text())
    assert report["environment"]["gpus"] == ["NVIDIA H200", "NVIDIA H200"]
    assert report["servers"][0]["launch"]["gpus"] == [uuids[0]]
    assert not list(gpus.glob("holder-*.json")) or all(
        not psutil.pid_exists(json.loads(p.read_text())["pid"]) for p in gpus.glob("holder-*")
    )
    assert emulators(tag) == []


def test_preflight_refuses_held_gpus(pytester: pytest.Pytester, tmp_path: Path) -> None:
    gpus = tmp_path / "gpus"
    uuids = write_fake_gpus(gpus, 1)
    zombie = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (gpus / f"holder-{zombie.pid}.json").write_text(json.dumps(
            {"pid": zombie.pid, "gpus": uuids, "used_mib": 76000, "name": "sglang::scheduler"}
        ))  # fmt: skip
        tag = profiles(pytester)
        pytester.makepyfile(
            "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
            "def test_a(sglang_server): pass\n"
        )
        result = pytester.runpytest("--sglang-launcher=emulator", f"-osglang_gpu_fake={gpus}")
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines([
            "*GPUs needed by the launch are not clean*",
            f"*GPU 0 (NVIDIA H200, {uuids[0]}): 74.2 GiB used by pid {zombie.pid} "
            "(sglang::scheduler) 74.2 GiB*",
        ])  # fmt: skip
        assert emulators(tag) == []
        assert zombie.poll() is None, "pre-flight must never kill a process it did not start"
    finally:
        zombie.kill()
        zombie.wait()


def test_emulator_dry_run_ignores_busy_real_gpus(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # A GPU host whose GPU another job holds: the probe the session gets (NVML on a real
    # host; here a stand-in returned in its place) sees the holder.
    gpus = tmp_path / "busy"
    uuids = write_fake_gpus(gpus, 1)
    (gpus / f"holder-{os.getpid()}.json").write_text(json.dumps(
        {"pid": os.getpid(), "gpus": uuids, "used_mib": 76000, "name": "other-job"}
    ))  # fmt: skip
    # Patched for the inner session only: the pool module outlives an in-process run.
    pytester.makeconftest(f"""
        from pathlib import Path
        import pytest
        import pytest_sglang.server.pool as pool
        from pytest_sglang.gpu.probes import FakeProbe

        @pytest.fixture(autouse=True, scope="session")
        def _busy_gpus():
            patch = pytest.MonkeyPatch()
            patch.setattr(pool, "make_probe",
                          lambda *, host, fake_dir: FakeProbe(Path({str(gpus)!r})))
            yield
            patch.undo()
    """)
    tag = profiles(pytester)
    pytester.makepyfile("""
        import os, psutil, pytest

        @pytest.mark.sglang_profile("baseline")
        def test_dry_run(sglang_server, sglang_gpu):
            assert sglang_server.launch.gpus == ()  # not pinned to real GPUs
            env = psutil.Process(sglang_server.launch.pid).environ()
            assert env.get("CUDA_VISIBLE_DEVICES") == os.environ.get("CUDA_VISIBLE_DEVICES")
            # The GPU state fixture still reads the host's GPUs, busy as they are.
            assert sglang_gpu.snapshot().processes[0].name == "other-job"
    """)
    result = pytester.runpytest("--sglang-launcher=emulator", "--sglang-require")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*GPU checks skipped: the emulator launcher holds no GPU (ini sglang_gpu_fake = DIR*"]
    )
    assert emulators(tag) == []


def test_launched_server_gets_the_profile_env_not_the_test_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COV_CORE_SOURCE", "nothing-to-cover")
    tag = profiles(pytester, extra='env = { PYTEST_ASKED_FOR = "yes", HF_HUB_OFFLINE = "1" }')
    pytester.makepyfile("""
        import psutil, pytest

        @pytest.mark.sglang_profile("eagle3")
        def test_env(sglang_server):
            env = psutil.Process(sglang_server.launch.pid).environ()
            assert "PYTEST_CURRENT_TEST" not in env and "COV_CORE_SOURCE" not in env
            assert env["PYTEST_ASKED_FOR"] == "yes" and env["HF_HUB_OFFLINE"] == "1"
            assert "PYTEST_SGLANG_LAUNCH_ID" in env  # how teardown finds what we started
            assert env["PATH"]
    """)
    result = pytester.runpytest("--sglang-launcher=emulator")
    result.assert_outcomes(passed=1)
    assert emulators(tag) == []


def test_attached_url_overrides_profile_and_keeps_its_expectations(
    pytester: pytest.Pytester, start_emulator: object
) -> None:
    emulator = start_emulator()  # type: ignore[operator]
    profiles(pytester)
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('eagle3')\ndef test_a(sglang_server): pass\n"
    )
    result = pytester.runpytest(f"--sglang-url=eagle3={emulator.url}")
    # The attached emulator runs no speculation: the eagle3 profile's expect table says so.
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*speculative_algorithm: expected \"EAGLE3\" (from profile "
                                 "'eagle3' in *pyproject.toml)*"])  # fmt: skip


def test_emulator_args_reach_only_the_emulator(pytester: pytest.Pytester) -> None:
    tag = profiles(pytester)
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    result = pytester.runpytest(
        "--sglang-launcher=emulator", "--sglang-ready-timeout=3",
        "-osglang_emulator_args=--emulator-fault never-ready",
    )  # fmt: skip
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([
        "*emulator args: --emulator-fault never-ready*",
        "*phase 'health' failed*",
        "*command: *pytest_sglang.emulator*--emulator-fault never-ready*",
    ])  # fmt: skip
    assert emulators(tag) == []


def test_launch_mode_under_xdist_without_readable_gpus_is_one_startup_error(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    # Issue 18: under -n 2 every test failed alike, 30 times the same message. Workers now
    # share the GPUs out (tests/e2e/test_xdist_gpus.py); where GPU state cannot be read the
    # controller refuses at startup, before any worker starts or any test runs.
    pytest.importorskip("xdist")
    tag = profiles(pytester)
    (tmp_path / "no-gpus-here").mkdir()
    pytester.makepyfile(
        "import pytest\n\n"
        + "".join(
            f"@pytest.mark.sglang_profile('baseline')\ndef test_{i}(sglang_server): pass\n\n"
            for i in range(30)
        )
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", "--sglang-launcher=emulator", "-p", "no:benchmark",
        f"-osglang_gpu_fake={tmp_path / 'no-gpus-here'}",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = result.stderr.str()
    assert errors.count("launch mode under pytest-xdist (-n 2) shares the host's GPUs out") == 1
    assert "has no gpus.json" in errors and "--sglang-url NAME=URL" in errors
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()
    assert emulators(tag) == []


def test_emulators_without_gpus_launch_in_every_xdist_worker(pytester: pytest.Pytester) -> None:
    # The emulator launcher without fake GPUs holds none: each worker launches its own.
    pytest.importorskip("xdist")
    tag = profiles(pytester)
    pytester.makepyfile(
        "import pytest\n\n"
        + "".join(
            f"@pytest.mark.sglang_profile('baseline')\ndef test_{i}(sglang_server): pass\n\n"
            for i in range(4)
        )
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "each", "--sglang-launcher=emulator", "-p", "no:benchmark"
    )
    result.assert_outcomes(passed=8)
    assert "2 server launches in 2 pytest-xdist worker(s)" in result.stdout.str()
    assert emulators(tag) == []


def test_xdist_with_every_profile_attached_is_allowed(
    pytester: pytest.Pytester, start_emulator: object
) -> None:
    pytest.importorskip("xdist")
    emulator = start_emulator()  # type: ignore[operator]
    profiles(pytester)
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('baseline')\n"
        "def test_a(sglang_server): pass\n"
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", f"--sglang-url=baseline={emulator.url}",
        f"--sglang-url=eagle3={emulator.url}", "-p", "no:benchmark",
    )  # fmt: skip
    # eagle3's expectations do not hold on a plain emulator, but baseline runs: no refusal.
    result.assert_outcomes(passed=1)
