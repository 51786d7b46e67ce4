"""Attach mode against a real SGLang 0.5.23: the gate with expectations, sglang_bench on all
three endpoints, the server's own /metrics and timings, the TTFT split in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.real.realserver import ServerRun, get_json

pytestmark = pytest.mark.timeout(900)

SUITE = """
import httpx
import pytest
from pytest_sglang import Workload, assert_at_most

WORKLOADS = {
    endpoint: Workload(input_len=24, output_len=8, requests=6, endpoint=endpoint, warmup=1)
    for endpoint in ("generate", "completions", "chat")
}


def test_identity(sglang_server):
    assert sglang_server.version == "0.5.23"
    assert sglang_server.model.id == "tiny" and sglang_server.model.max_model_len == 4096
    # A real server's "not given": null, with the effective values elsewhere.
    assert sglang_server.server_info["context_length"] is None
    assert sglang_server.server_info["max_running_requests"] is None
    assert sglang_server.context_length == 4096
    assert sglang_server.max_running_requests == {effective}
    assert sglang_server.vocab_size == 32000  # the model directory is on this machine
    assert list(sglang_server.readiness.phases) == [
        "connect", "health", "models", "identity", "server_info"
    ]


@pytest.mark.parametrize("endpoint", ["generate", "completions", "chat"])
def test_bench(sglang_bench, endpoint):
    result = sglang_bench("real", WORKLOADS[endpoint], concurrency=2, repeats=2)
    assert result.valid, result.problems()
    assert result.errors == 0
    assert all(run.completed == run.requests == 6 for run in result.runs)
    assert all(run.output_tokens == 6 * 8 for run in result.runs)


def test_ttft_split_in_the_evidence(sglang_bench):
    result = sglang_bench("real", WORKLOADS["generate"], concurrency=2, repeats=2)
    verdict = assert_at_most(result, "ttft.p50", 60.0, alpha=0.25)
    split = verdict.evidence["ttft_breakdown"]["real"]
    assert split["split"] == split["requests"] == 12
    assert "TTFT p50" in verdict.table and "queue" in verdict.table


def test_metrics(sglang_client):
    text = sglang_client.get("/metrics").text
    for name in ("sglang:num_requests_total", "sglang:time_to_first_token_seconds",
                 "sglang:queue_time_seconds", "sglang:http_requests_total",
                 "sglang:max_total_num_tokens"):
        assert f"# TYPE {name} " in text, name
"""


@pytest.fixture
def effective(real_server: ServerRun) -> int:
    info = get_json(real_server.url, "/server_info")
    value = info["internal_states"][0]["effective_max_running_requests_per_dp"]
    assert isinstance(value, int)
    return value


def test_attach_gate_bench_metrics_report(
    pytester: pytest.Pytester, real_server: ServerRun, effective: int
) -> None:
    pytester.makepyfile(SUITE.replace("{effective}", str(effective)))
    result = pytester.runpytest(
        f"--sglang-url=real={real_server.url}",
        "--sglang-expect=model_id=tiny",
        "--sglang-expect=max_model_len=4096",
        # null on this server's /server_info: checked against the effective value
        f"--sglang-expect=max_running_requests={effective}",
        "--sglang-expect=served_model_name=tiny",
        "--sglang-expect=tp_size=1",
        "--sglang-report=report.json",
        "--sglang-require",
        "-p",
        "no:randomly",
    )
    result.assert_outcomes(passed=6)
    report = json.loads(Path(pytester.path, "report.json").read_text())
    measured = {(m["workload"]["endpoint"], m["concurrency"]) for m in report["measurements"]}
    assert measured == {("generate", 2), ("completions", 2), ("chat", 2)}
    assert all(run["failed"] == 0 for m in report["measurements"] for run in m["runs"])
    (verdict,) = report["verdicts"]
    assert "real" in verdict["evidence"]["ttft_breakdown"]
    result.stdout.fnmatch_lines(["*TTFT split, real: p50 * ms = queue * + prefill * + rest *"])
    print("\n".join(line for line in result.stdout.lines if "TTFT split" in line))  # noqa: T201


def test_gate_names_the_effective_value_when_the_expectation_is_wrong(
    pytester: pytest.Pytester, real_server: ServerRun, effective: int
) -> None:
    pytester.makepyfile("def test_x(sglang_server):\n    pass\n")
    result = pytester.runpytest(
        f"--sglang-url=real={real_server.url}",
        "--sglang-expect=max_running_requests=48",
        "--sglang-require",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*max_running_requests: expected 48*reports null (not set on the server's command "
            f"line), the effective value is {effective} (internal_states*"
        ]
    )
