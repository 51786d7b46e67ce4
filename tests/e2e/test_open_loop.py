"""sglang_bench in an open loop: rate in the cache key and the report, capacity by rate."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sglang.testing import EmulatorProcess

pytestmark = pytest.mark.slow

Start = Callable[..., EmulatorProcess]

SUITE = """
import pytest
from pytest_sglang import Workload, find_capacity

W = Workload(input_len=16, output_len=16, requests=40, warmup=2)

def test_open_loop(sglang_bench):
    result = sglang_bench("a", W, rate=20.0, arrival="constant", repeats=2)
    assert result.open_loop is not None and result.label() == "a @ 20 req/s constant"
    # Not result.valid: on a crowded machine the client may send late (the schedule check).
    assert result.errors == 0
    for run in result.runs:
        assert run.mode == "open" and run.rate == 20.0 and run.requests == 40
        # The server keeps up: tokens leave as fast as requests arrive (rate x output_len);
        # the window is the 39 gaps between sends plus the last request's latency.
        assert run.output_throughput == pytest.approx(20.0 * 16, rel=0.1)
        assert run.check("output_length").passed
    pytest.shared = result

def test_cached_with_the_rate_in_the_key(sglang_bench):
    assert sglang_bench("a", W, rate=20.0, arrival="constant", repeats=2) is pytest.shared
    other = sglang_bench("a", W, rate=40.0, arrival="constant", max_concurrency=4, repeats=1)
    assert other is not pytest.shared and other.concurrency == 4
    assert other.runs[0].max_concurrency == 4

def test_bad_open_loop_calls(sglang_bench):
    with pytest.raises(ValueError, match="not both"):
        sglang_bench("a", W, concurrency=4, rate=10.0)
    with pytest.raises(ValueError, match="give its rate too"):
        sglang_bench("a", W, max_concurrency=4)
    with pytest.raises(ValueError, match="rate must be a finite number > 0"):
        sglang_bench("a", W, rate=0.0)

def test_capacity_by_rate(sglang_bench):
    def run(rate, repeat):
        return sglang_bench.run_once("a", W, rate=rate, arrival="constant", repeat=repeat)

    # 40 requests in 40 meeting a p90 decide a level in one run (a p99 needs ~300).
    verdict = find_capacity(run, [10.0, 20.0], "e2e_latency.p90 <= 10s", unit="rate",
                            label="a")
    assert verdict.level == 20.0 and "rate=20" in verdict.statement()
    assert verdict.runs == 2
    missed = find_capacity(run, [10.0], "e2e_latency.p50 <= 0.1ms", unit="rate")
    assert missed.level is None and missed.decided
"""


def test_open_loop_bench(pytester: pytest.Pytester, start_emulator: Start) -> None:
    emulator = start_emulator()
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(
        f"--sglang-url=a={emulator.url}", "--sglang-report=r.json", "-p", "no:randomly"
    )
    result.assert_outcomes(passed=4)
    # The summary's load column shows the rate (and the cap).
    result.stdout.fnmatch_lines(["*a*20/s*", "*a*40/s <=4*"])
    report = json.loads(Path(pytester.path, "r.json").read_text())
    loads = sorted(
        (m["rate"], m["arrival"], m["max_concurrency"], m["concurrency"])
        for m in report["measurements"]
    )
    assert loads == [(20.0, "constant", None, 0), (40.0, "constant", 4, 4)]
    from pytest_sglang.report.html import render_html

    # The HTML report's load column too; and its concurrency plots leave open loops out.
    page = render_html(report)
    assert ">20/s</td>" in page and ">40/s &lt;=4</td>" in page
