"""A plain OpenAI-compatible server, declared as such, compared with an SGLang emulator by
``assert_faster`` in one test; the report says which checks did not apply (issue 13)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sglang.testing import EmulatorProcess
from tests.servers.process import running_server

pytestmark = pytest.mark.slow

Start = Callable[..., EmulatorProcess]
TOKEN = "sk-partner-token-5678"

SUITE = """
import pytest
from pytest_sglang import Workload, assert_faster

W = Workload(input_len=8, output_len=8, requests=4, warmup=0, endpoint="completions")

def test_openai_server_beats_the_slow_emulator(sglang_bench):
    vllm = sglang_bench("vllm", W, concurrency=2, repeats=5)
    sglang = sglang_bench("sglang", W, concurrency=2, repeats=5)
    assert vllm.valid and sglang.valid, (vllm.problems(), sglang.problems())
    verdict = assert_faster(vllm, sglang)
    assert any("vllm is an OpenAI-compatible server" in w for w in verdict.warnings)
    assert verdict.evidence["not_applicable"] == {"vllm": sorted(vllm.not_applicable)}

def test_native_workloads_are_refused(sglang_bench):
    with pytest.raises(ValueError, match="declared OpenAI-compatible: it has no SGLang"):
        sglang_bench("vllm", Workload(input_len=8, output_len=4, requests=2), repeats=1)
"""


def test_an_openai_server_is_compared_with_sglang(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    emulator = start_emulator("--emulator-decode-ms", "25")
    pytester.makepyfile(SUITE)
    with running_server("openai_like", "--owned-by", "vllm", "--require-auth", TOKEN) as vllm:
        result = pytester.runpytest(
            f"--sglang-url=vllm=openai+{vllm.url}",
            f"--sglang-url=sglang={emulator.url}",
            f"--sglang-header=vllm:Authorization=Bearer {TOKEN}",
            "--sglang-report=r.json",
            "--sglang-markdown=s.md",
            "-p",
            "no:randomly",
        )
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    report_text = Path(pytester.path, "r.json").read_text()
    markdown = Path(pytester.path, "s.md").read_text()
    # The token travelled with every request to vllm, and appears in no output.
    for text in (out, report_text, markdown):
        assert TOKEN not in text
    report = json.loads(report_text)
    servers = {s["name"]: s for s in report["servers"]}
    assert servers["vllm"]["kind"] == "openai"
    assert set(servers["vllm"]["not_applicable"]) == {
        "server_info", "server_counters", "server_timings", "acceptance_length",
    }  # fmt: skip
    assert "server_info" in servers["vllm"]["readiness"]["skipped"]
    assert "kind" not in servers["sglang"] and servers["sglang"]["config"]
    measured = {m["server"]: m for m in report["measurements"]}
    assert "server_info" in measured["vllm"]["not_applicable"]
    assert "not_applicable" not in measured["sglang"]
    (verdict,) = [v for v in report["verdicts"] if v["kind"] == "assert_faster"]
    assert verdict["outcome"] == "pass"
    assert "vllm is an OpenAI-compatible server" in verdict["warnings"][0]
    line = (
        "vllm is an OpenAI-compatible server; checks that did not apply: server_info, "
        "server_counters, server_timings, acceptance_length"
    )
    assert line in markdown and line in out
