"""Launch mode against a real SGLang 0.5.23: the plugin starts the server from a profile,
gates it with expectations, measures the three endpoints, and tears it down with nothing left
(checked by pid after the session)."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from tests.real.conftest import RealServers
from tests.real.realserver import launch_profile, pid_alive

pytestmark = pytest.mark.timeout(900)

SUITE = """
import json

import psutil
import pytest
from pytest_sglang import Workload


def workload(endpoint):
    return Workload(input_len=16, output_len=6, requests=4, endpoint=endpoint, warmup=1)


def test_launched_server(sglang_server, sglang_bench, sglang_client):
    launch = sglang_server.launch
    assert launch is not None and launch.pid and launch.launcher == "sglang"
    leader = psutil.Process(launch.pid)
    pids = [launch.pid] + [child.pid for child in leader.children(recursive=True)]
    assert len(pids) >= 3  # SGLang's server, scheduler and detokenizer
    with open("pids.json", "w") as out:
        json.dump(pids, out)
    for endpoint in ("generate", "completions", "chat"):
        result = sglang_bench("real-tiny", workload(endpoint), concurrency=2, repeats=1)
        assert result.valid, result.problems()
        assert result.errors == 0
    # The server's own timings came with every native response.
    native = sglang_bench("real-tiny", workload("generate"), concurrency=2, repeats=1)
    assert all(r.server_times and "queue_time" in r.server_times
               for r in native.runs[0].records)
    metrics = sglang_client.get("/metrics")
    assert metrics.status_code == 200 and "sglang:num_requests_total" in metrics.text
"""


def test_launch_gate_bench_teardown_nothing_left(
    pytester: pytest.Pytester, real_servers: RealServers
) -> None:
    with real_servers.exclusive():
        tier = real_servers.tier
        profile = launch_profile.profile_toml(python=tier.python, model=tier.model)
        # null on a real /server_info: checked against the effective value
        assert "max_running_requests = 2048" in profile
        pytester.makefile(".toml", real=profile)
        pytester.makepyfile(SUITE)
        result = pytester.runpytest(
            "--sglang-profiles=real.toml",
            "--sglang-report=report.json",
            # Not --sglang-require: it would demand GPU state, which this CPU tier has none of.
            "-p",
            "no:randomly",
        )
        result.assert_outcomes(passed=1)
        pids = json.loads(Path(pytester.path, "pids.json").read_text())
        left = [pid for pid in pids if pid_alive(pid)]
        assert not left, [psutil.Process(p).cmdline() for p in left if pid_alive(p)]
        report = json.loads(Path(pytester.path, "report.json").read_text())
        (server,) = report["servers"]
        launch = server["launch"]
        assert launch["pid"] == pids[0]
        assert all(run["failed"] == 0 for m in report["measurements"] for run in m["runs"])
        assert {m["workload"]["endpoint"] for m in report["measurements"]} == {
            "generate",
            "completions",
            "chat",
        }
