"""A failed validity check fails the measurement, as failed requests do, unless the call
allowed that check; the terminal table marks the run (issue 23, item 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.servers.process import running_server

SUITE = """
import pytest
from pytest_sglang import Workload

W = Workload(input_len=8, output_len=8, requests=4, warmup=0, endpoint="completions")

def test_measured(sglang_bench):
    sglang_bench("liar", W, concurrency=1, repeats=1)

def test_allowed(sglang_bench):
    result = sglang_bench("liar", W, concurrency=1, repeats=1, allow_checks=["token_counts"])
    assert not result.valid  # allowed, not hidden: the check still failed

def test_unknown_check(sglang_bench):
    with pytest.raises(ValueError, match="no validity check 'token_count'.*token_counts"):
        sglang_bench("liar", W, concurrency=1, repeats=1, allow_checks=["token_count"])
"""


def test_a_server_that_over_claims_tokens_fails_the_measurement(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(SUITE)
    # The server streams 7 of the 8 tokens asked for and says it generated 8.
    with running_server("openai_like", "--overclaim", "1", "--usage", "running") as liar:
        result = pytester.runpytest(
            f"--sglang-url=liar=openai+{liar.url}", "--sglang-report=r.json", "-p", "no:randomly"
        )
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*_ test_measured _*",
            "the measurement of liar @ C=1 (http://*) is invalid: a validity check failed "
            "(token_counts)*",
            "*run 1: token_counts: 4 requests' token counts disagree*",
            "*allow_checks=*token_counts*",
        ]
    )
    # The table marks the run, and says which check failed under it.
    row = next(line for line in out.splitlines() if line.startswith("liar"))
    assert "(invalid)" in row
    assert "liar @ C=1: validity check failed: token_counts (1 of 1 runs)" in out
    report = json.loads(Path(pytester.path, "r.json").read_text())
    (measurement,) = report["measurements"]
    (run,) = measurement["runs"]
    assert run["valid"] is False
