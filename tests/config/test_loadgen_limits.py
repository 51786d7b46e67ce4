"""sglang_first_token_timeout and sglang_max_consecutive_failures: sources, errors, and
that sglang_bench's load generator really runs with them (issue 13)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from pytest_sglang.testing import running_emulator

pytestmark = pytest.mark.filterwarnings("default")

SHOWS_LIMITS = """
def test_show(sglang_settings):
    s = sglang_settings
    print("FIRST", s.first_token_timeout.value, s.first_token_timeout.source)
    print("MAXFAIL", s.max_consecutive_failures.value, s.max_consecutive_failures.source)
"""


def shown(pytester: pytest.Pytester, *args: str) -> str:
    pytester.makepyfile(test_show=SHOWS_LIMITS)
    result = pytester.runpytest("-s", *args)
    result.assert_outcomes(passed=1)
    return result.stdout.str()


def test_defaults_are_the_load_generators() -> None:
    from pytest_sglang.config.options import (
        DEFAULT_FIRST_TOKEN_TIMEOUT,
        DEFAULT_MAX_CONSECUTIVE_FAILURES,
    )
    from pytest_sglang.loadgen.runner import LoadGenerator

    generator = LoadGenerator("http://127.0.0.1:9")
    assert generator.first_token_timeout == DEFAULT_FIRST_TOKEN_TIMEOUT == 90.0
    assert generator.max_consecutive_failures == DEFAULT_MAX_CONSECUTIVE_FAILURES == 8


def test_each_source_and_the_header(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = shown(pytester)
    assert "FIRST 90.0 default" in out and "MAXFAIL 8 default" in out
    assert "first-token-timeout" not in out  # the header shows them only when set
    pytester.makeini(
        "[pytest]\nsglang_first_token_timeout = 2m\nsglang_max_consecutive_failures = 3\n"
    )
    monkeypatch.setenv("PYTEST_SGLANG_MAX_CONSECUTIVE_FAILURES", "0")
    out = shown(pytester, "-osglang_first_token_timeout=45s")
    assert "FIRST 45.0 -o sglang_first_token_timeout on the command line" in out
    assert "MAXFAIL 0 environment variable PYTEST_SGLANG_MAX_CONSECUTIVE_FAILURES" in out
    assert "sglang: first-token-timeout: 45s (from -o sglang_first_token_timeout on the " in out
    assert "max-consecutive-failures: never (from environment variable" in out


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        # "token" followed by "-timeout" names a duration, not a secret: the typo is shown.
        ("-osglang_first_token_timeout=soon", "'soon' is not a duration"),
        ("-osglang_first_token_timeout=0", "'0' is not a positive duration"),
        ("-osglang_max_consecutive_failures=-1", "'-1' is not a whole number"),
        ("-osglang_max_consecutive_failures=2.5", "'2.5' is not a whole number"),
        # str.isdigit() accepts it, int() does not: the schema's [0-9] is the one rule.
        ("-osglang_max_consecutive_failures=\u00b2", "'\u00b2' is not a whole number"),
    ],
)
def test_bad_values_name_the_option_and_the_fix(
    pytester: pytest.Pytester, option: str, expected: str
) -> None:
    result = pytester.runpytest(option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    key = option.split("=")[0].removeprefix("-o")
    assert f"{key}: {expected} (from -o {key} on the command line)" in err


FROZEN_SUITE = """
import os, signal
from pytest_sglang import Workload

def test_frozen(sglang_servers, sglang_bench):
    sglang_servers.get("default")  # the gate passes while the server answers
    os.kill(int(os.environ["FROZEN_PID"]), signal.SIGSTOP)
    sglang_bench("default", Workload(input_len=8, output_len=8, requests=40, warmup=0),
                 concurrency=2, repeats=5)
"""


def test_sglang_bench_runs_with_the_options(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(FROZEN_SUITE)
    with running_emulator(tmp_path) as emulator:
        monkeypatch.setenv("FROZEN_PID", str(emulator.process.pid))
        try:
            result = pytester.runpytest(
                f"--sglang-url={emulator.url}",
                "-osglang_first_token_timeout=1s",
                "-osglang_max_consecutive_failures=3",
                "-osglang_stall_timeout=1s",
            )
        finally:
            os.kill(emulator.process.pid, signal.SIGCONT)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    # Three failures in a row (not the default eight), each after 1 s (not 90 s).
    assert "the server stopped answering: 3 consecutive transport failures" in out
    assert "no token for 1 s" in out or "timed out waiting for the first token" in out
    assert result.duration < 30
    # Said once, not again as the context of the test's failure.
    assert "During handling of the above exception" not in out
    # The short summary repeats the failure's message by design; count before it.
    failures_section = out.split("short test summary info")[0]
    assert failures_section.count("the server stopped answering: 3 consecutive") == 1
