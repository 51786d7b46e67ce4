"""One progress line per measured run: in place on a terminal, its last word in a log,
nothing under ``-q`` (issue 23, item 10)."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
from _pytest.terminal import TerminalReporter

from pytest_sglang.report.progress import RunLine
from pytest_sglang.testing import EmulatorProcess

Start = Callable[..., EmulatorProcess]

SUITE = """
from pytest_sglang import Workload

def test_measured(sglang_bench):
    sglang_bench("default", Workload(input_len=8, output_len=8, requests=6, warmup=2),
                 concurrency=2, repeats=2)
"""


def test_each_run_leaves_one_line_in_a_log_and_none_under_q(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    emulator = start_emulator()
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(f"--sglang-url={emulator.url}", "-s")
    result.assert_outcomes(passed=1)
    # Not a terminal: no rewriting, one line per run with its final figures (warm-up
    # included: 2 + 6 requests).
    out = result.stdout.str()
    assert "\r" not in out
    result.stdout.fnmatch_lines(
        [
            "sglang: measuring default C=2 run 1/2: 8/8 requests, * output tok/s",
            "sglang: measuring default C=2 run 2/2: 8/8 requests, * output tok/s",
        ]
    )
    assert out.count("sglang: measuring default") == 2

    quiet = pytester.runpytest(f"--sglang-url={emulator.url}", "-q", "-s")
    quiet.assert_outcomes(passed=1)
    assert "sglang: measuring" not in quiet.stdout.str()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_line_is_rewritten_in_place(pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig()
    screen = _Terminal()
    reporter = TerminalReporter(config, screen)
    reporter.write_fspath_result("test_a.py::test_x", "")  # pytest mid-line: "test_a.py "
    line = RunLine(reporter)
    assert line.in_place
    line.show("sglang: measuring srv C=1 run 1/2: 1/8 requests, 10 output tok/s")
    line.show("sglang: measuring srv C=1 run 1/2: 5/8 requests, 50 output tok/s")
    line.end("sglang: measuring srv C=1 run 1/2: 8/8 requests, 80 output tok/s")
    line.show("sglang: measuring srv C=1 run 2/2: 2/8 requests, 20 output tok/s")
    line.end("sglang: measuring srv C=1 run 2/2: 8/8 requests, 81 output tok/s")
    reporter.write_line("what pytest writes next")
    lines = [part.split("\r")[-1].rstrip() for part in screen.getvalue().split("\n")]
    # Off pytest's line, one line per run (its last state), and what follows goes below.
    assert lines == [
        "",
        "test_a.py",
        "sglang: measuring srv C=1 run 1/2: 8/8 requests, 80 output tok/s",
        "sglang: measuring srv C=1 run 2/2: 8/8 requests, 81 output tok/s",
        "what pytest writes next",
        "",
    ], lines
    assert screen.getvalue().count("\r") == 5


def test_a_silent_line_says_nothing() -> None:
    line = RunLine(None, quiet=True)
    assert not line.in_place and line.quiet
    line.show("x")
    line.end("x")
