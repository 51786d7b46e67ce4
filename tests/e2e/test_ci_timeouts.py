"""pytest-timeout as CI suites set it: launches are outside the tests' timeouts.

A server launch and its readiness wait belong to the session, bounded by
``--sglang-ready-timeout``; the test's own pytest-timeout covers the test. A timeout that
strikes during a measurement keeps what was measured, and says what cut it.
"""

from __future__ import annotations

import json
import uuid

import pytest

from tests.server.test_launch import emulators

pytestmark = pytest.mark.slow

QUICK = (
    '"--emulator-warmup-time", "0", "--emulator-health-probe-time", "0", '
    '"--emulator-decode-ms", "1"'
)


def _project(pytester: pytest.Pytester, timeout: int, method: str, load_time: float) -> str:
    """Write a pyproject.toml with a pytest-timeout ini and one slow-loading profile."""
    tag = uuid.uuid4().hex[:8]
    pytester.makepyprojecttoml(f"""
        [tool.pytest.ini_options]
        timeout = {timeout}
        timeout_method = "{method}"

        [tool.pytest-sglang.profiles.slow]
        model-path = "test-{tag}/model"
        args = ["--emulator-load-time", "{load_time}", {QUICK}]
    """)
    return tag


@pytest.mark.parametrize("method", ["signal", "thread"])
def test_a_launch_longer_than_the_timeout_passes_with_one_launch(
    pytester: pytest.Pytester, method: str
) -> None:
    # The story's CI: timeout = 5 in the ini, a server that loads for 8 s.
    _project(pytester, timeout=5, method=method, load_time=8)
    pytester.makepyfile("""
        import pytest

        pytestmark = pytest.mark.sglang_profile("slow")

        def test_first(sglang_server):
            assert sglang_server.name == "slow"

        def test_second(sglang_client):
            assert sglang_client.get("/v1/models").status_code == 200
    """)
    result = pytester.runpytest_subprocess("--sglang-launcher=emulator", "-p", "no:randomly")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert "1 server launch:" in out
    assert "Timeout" not in out


def test_the_test_timeout_still_counts_the_tests_own_time(pytester: pytest.Pytester) -> None:
    # Suspended, not disabled: after the launch the test has what it had left.
    _project(pytester, timeout=4, method="signal", load_time=3)
    pytester.makepyfile("""
        import time
        import pytest

        @pytest.mark.sglang_profile("slow")
        def test_sleeps_past_its_timeout(sglang_server):
            time.sleep(30)
    """)
    result = pytester.runpytest_subprocess("--sglang-launcher=emulator")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Timeout (>*s) from pytest-timeout*"])


def test_a_timeout_during_a_measurement_keeps_the_finished_runs(
    pytester: pytest.Pytester,
) -> None:
    # Each run takes about 10 x 100 tokens x 2 ms: the 4 s timeout strikes mid-measurement.
    tag = uuid.uuid4().hex[:8]
    pytester.makepyprojecttoml(f"""
        [tool.pytest.ini_options]
        timeout = 4

        [tool.pytest-sglang.profiles.srv]
        model-path = "test-{tag}/model"
        args = ["--emulator-load-time", "0", "--emulator-warmup-time", "0",
                "--emulator-health-probe-time", "0", "--emulator-decode-ms", "2"]
    """)
    pytester.makepyfile("""
        from pytest_sglang import Workload

        def test_long_measurement(sglang_bench):
            sglang_bench("srv", Workload(input_len=16, output_len=100, requests=10), 1,
                         repeats=20)
    """)
    result = pytester.runpytest_subprocess(
        "--sglang-launcher=emulator", "--sglang-report=r.json", "--sglang-markdown=s.md"
    )
    result.assert_outcomes(failed=1)
    (entry,) = json.loads((pytester.path / "r.json").read_text())["measurements"]
    assert "pytest-timeout" in entry["cut"], entry.get("cut")
    assert "of 20" in entry["cut"]
    assert 1 <= len(entry["runs"]) < 20
    assert sum(run["completed"] for run in entry["runs"]) >= 1
    markdown = (pytester.path / "s.md").read_text()
    assert "srv (cut)" in markdown and "was cut by the test's pytest-timeout" in markdown
    result.stdout.fnmatch_lines(["*the measurement srv @ C=1 was cut*"])


def test_an_interrupted_launch_is_not_launched_again(pytester: pytest.Pytester) -> None:
    # Something raised while the pool starts the server (here the test's own alarm; in
    # the field a timeout plugin the bridge does not know): the pool records the
    # interruption, and later tests fail at once, naming it, instead of a second launch.
    _project(pytester, timeout=60, method="signal", load_time=8)
    pytester.makepyfile("""
        import signal
        import pytest

        class Interrupted(BaseException):  # as pytest's own Failed: no except Exception
            pass

        def _interrupt(signum, frame):
            raise Interrupted("interrupted on purpose")

        def test_interrupted(sglang_servers):
            signal.signal(signal.SIGALRM, _interrupt)
            signal.setitimer(signal.ITIMER_REAL, 2.0)
            try:
                sglang_servers.get("slow")
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)

        @pytest.mark.sglang_profile("slow")
        def test_after(sglang_server):
            pass
    """)
    result = pytester.runpytest_subprocess(
        "--sglang-launcher=emulator", "-p", "no:randomly", "-p", "no:timeout"
    )
    result.assert_outcomes(failed=1, errors=1)
    out = result.stdout.str()
    assert "1 server launch:" in out
    result.stdout.fnmatch_lines(
        ["*the start of SGLang server 'slow' was interrupted by Interrupted*on purpose*"]
    )


def test_stopping_the_last_server_is_not_the_last_tests_time(pytester: pytest.Pytester) -> None:
    # A server that ignores SIGTERM takes the 15 s grace period to stop, in the last test's
    # teardown: the test's 5 s timeout must not strike there (and leave it running).
    tag = _project(pytester, timeout=5, method="signal", load_time=0)
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sglang_profile("slow")
        def test_only(sglang_server):
            pass
    """)
    result = pytester.runpytest_subprocess(
        "--sglang-launcher=emulator", "-osglang_emulator_args=--emulator-fault ignore-sigterm"
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "Timeout" not in out
    assert "forced: SIGKILL" in out, out
    assert emulators(tag) == []
