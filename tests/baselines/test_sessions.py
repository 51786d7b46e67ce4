"""Two sessions against the emulator: save a baseline, then catch a 20 % slower decode step.

Session 1 saves a baseline of the emulator; session 2 against an emulator whose decode step
is 20 % slower (``--emulator-step-base-ms``) fails with a regression verdict naming metric,
ratio and bound; session 2 against an identical emulator passes (or is inconclusive). Then
``pytest-sglang compare`` on the stored sessions, ``pytest-benchmark list/compare`` on the
store, and ``pytest-sglang merge`` of the sessions' reports.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pytest_sglang.cli import validate_report
from pytest_sglang.testing import running_emulator

pytestmark = pytest.mark.slow

SUITE = """
from pytest_sglang import Workload

W = Workload(input_len=8, output_len=64, requests=2, warmup=1, stream=False)

def test_decode_throughput(sglang_bench):
    result = sglang_bench("default", W, concurrency=1, repeats=5)
    assert result.valid, result.problems()
"""
#: The emulator's default decode step at C=1 is 9.52 + 1.254 ms; +20 % is 12.93 ms. (At +10 %
#: the measured ratio, diluted by prefill and the client, is about 0.94: too close to the 5 %
#: bound for two sessions minutes apart on a shared machine to decide every time.)
SLOWER = ("--emulator-step-base-ms", "11.68")
#: Requests of ~0.35 s, unstreamed: the client's share of each stays a few percent even on
#: a loaded machine, whose load may change between the sessions.
FAST = ("--emulator-engine", "batch", "--emulator-speedup", "2")
FAIL = "--sglang-compare-fail=output_throughput:5%"


@dataclass
class Sessions:
    path: Path
    save: subprocess.CompletedProcess[str]
    slower: subprocess.CompletedProcess[str]
    identical: subprocess.CompletedProcess[str]


def _pytest(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _cli(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_sglang.cli", *args],
        cwd=path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sessions]:
    path = tmp_path_factory.mktemp("sessions")
    (path / "test_suite.py").write_text(SUITE)
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(running_emulator(path, *FAST))
        slow = stack.enter_context(running_emulator(path, *FAST, *SLOWER))
        save = _pytest(path, f"--sglang-url={base.url}", "--sglang-save=released",
                       "--sglang-report=released.json")  # fmt: skip
        slower = _pytest(path, f"--sglang-url={slow.url}", "--sglang-compare", FAIL,
                         "--sglang-save=slower", "--sglang-report=slower.json")  # fmt: skip
        identical = _pytest(path, f"--sglang-url={base.url}", "--sglang-compare", FAIL,
                            "--sglang-save=identical", "--sglang-report=same.json")  # fmt: skip
    yield Sessions(path, save, slower, identical)


def test_session_one_saves_a_baseline(sessions: Sessions) -> None:
    out = sessions.save.stdout
    assert sessions.save.returncode == 0, out
    assert "saved 1 measurement(s) to" in out and "0001_released.json" in out
    assert (sessions.path / ".benchmarks" / "sglang" / "0001_released.json").is_file()


def test_a_twenty_percent_slower_decode_step_fails_with_a_regression_verdict(
    sessions: Sessions,
) -> None:
    out = sessions.slower.stdout
    assert sessions.slower.returncode == 1, out
    assert "1 failed" in out
    assert "performance regression against the stored baseline" in out
    # The verdict names the metric, the ratio and the bound.
    assert "on output_throughput: REGRESSION: now/stored = 0." in out
    assert "< bound 0.9500 (5% tolerance)" in out
    report = json.loads((sessions.path / "slower.json").read_text())
    (verdict,) = [v for v in report["verdicts"] if v["kind"] == "assert_no_regression"]
    assert verdict["outcome"] == "fail"
    assert 0.75 < verdict["evidence"]["ratio_now_stored"] < 0.95
    assert verdict["evidence"]["stored_session"] == "sglang/0001_released"


def test_an_identical_emulator_passes_or_is_inconclusive(sessions: Sessions) -> None:
    out = sessions.identical.stdout
    assert sessions.identical.returncode == 0, out
    assert "1 passed" in out
    report = json.loads((sessions.path / "same.json").read_text())
    (verdict,) = [v for v in report["verdicts"] if v["kind"] == "assert_no_regression"]
    assert verdict["outcome"] in ("pass", "inconclusive")


def test_pytest_sglang_compare_exit_codes(sessions: Sessions) -> None:
    slower = _cli(sessions.path, "compare", "released", "slower", "--fail", "output_throughput:5%")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "REGRESSION" in slower.stdout
    same = _cli(sessions.path, "compare", "released", "identical", "--fail",
                "output_throughput:5%")  # fmt: skip
    assert same.returncode == 0, same.stdout + same.stderr
    # Reports work as well as stored sessions.
    reports = _cli(sessions.path, "compare", "released.json", "slower.json", "--fail",
                   "output_throughput:5%")  # fmt: skip
    assert reports.returncode == 1, reports.stdout + reports.stderr
    misuse = _cli(sessions.path, "compare", "released", "no-such-session")
    assert misuse.returncode == 2
    assert "no stored session 'no-such-session'" in misuse.stderr
    listed = _cli(sessions.path, "list")
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "sglang/0001_released", "sglang/0002_slower", "sglang/0003_identical",
    ]  # fmt: skip


def test_pytest_benchmark_reads_the_store(sessions: Sessions) -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "list"],
        cwd=sessions.path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    assert "0002_slower.json" in listed.stdout
    compared = subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", "compare", "0001", "0002"],
        cwd=sessions.path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compared.returncode == 0, compared.stderr
    assert "default C=1 output_throughput (0001_release)" in compared.stdout
    assert "default C=1 output_throughput (0002_slower)" in compared.stdout


def test_merge_of_sharded_reports_validates(sessions: Sessions) -> None:
    merged = _cli(sessions.path, "merge", "merged.json", "released.json", "slower.json")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    document = json.loads((sessions.path / "merged.json").read_text())
    assert validate_report(document) == []
    assert len(document["measurements"]) == 2
    assert [v["kind"] for v in document["verdicts"]] == ["assert_no_regression"]


def test_report_renders_a_stored_session_with_its_baseline(sessions: Sessions) -> None:
    done = _cli(sessions.path, "report", "slower", "--baseline", "released", "-o", "q.html",
                "--fail", "output_throughput:5%")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    page = (sessions.path / "q.html").read_text()
    assert page.count("<svg") == 2 and "REGRESSION" in page and "baseline sglang/0001" in page
    markdown = _cli(sessions.path, "report", "same.json")
    assert markdown.returncode == 0 and "| default | 1 | 5 |" in markdown.stdout
