"""The sglang_bench fixture end to end against the emulator: caching, sweeps, pairs, records."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sglang.testing import EmulatorProcess

pytestmark = pytest.mark.slow

Start = Callable[..., EmulatorProcess]

SUITE = """
import pytest
from pytest_sglang import Workload, BenchResult, Sweep

W = Workload(input_len=8, output_len=4, requests=4, requests_per_slot=2)

def test_first(sglang_bench):
    result = sglang_bench("a", W, concurrency=2, repeats=2)
    assert isinstance(result, BenchResult) and len(result.runs) == 2
    assert result.valid, result.problems()
    assert result.runs[0].requests == 4
    pytest.shared = result

def test_cached(sglang_bench):
    again = sglang_bench("a", W, concurrency=2, repeats=2)
    assert again is pytest.shared

def test_sweep(sglang_bench):
    sweep = sglang_bench("a", W, concurrency=[3, 1], repeats=1)
    assert isinstance(sweep, Sweep) and sweep.levels == (1, 3)
    assert sweep[3].runs[0].requests == 6  # requests_per_slot scales with the level
    assert sweep[1].median("output_throughput") > 0

def test_pair_interleaves_attached_servers(sglang_bench):
    a, b = sglang_bench.pair("a", "b", W, concurrency=1, repeats=2)
    assert a.schedule == b.schedule == "interleaved"
    assert a.server == "a" and b.server == "b"

def test_too_few_requests(sglang_bench):
    with pytest.raises(ValueError, match="can never hold 50 requests in flight"):
        sglang_bench("a", Workload(input_len=8, output_len=4, requests=10), concurrency=50)

def test_unknown_server_skips(sglang_bench):
    sglang_bench("nope", W)
"""


def test_bench_fixture(pytester: pytest.Pytester, start_emulator: Start) -> None:
    a, b = start_emulator(), start_emulator()
    pytester.makepyfile(SUITE)
    result = pytester.runpytest(
        f"--sglang-url=a={a.url}", f"--sglang-url=b={b.url}", "--sglang-report=r.json", "-rs"
    )
    result.assert_outcomes(passed=5, skipped=1)
    result.stdout.fnmatch_lines(["*no SGLang server or profile named 'nope'*"])
    report = json.loads(Path(pytester.path, "r.json").read_text())
    keys = sorted((m["server"], m["concurrency"], len(m["runs"])) for m in report["measurements"])
    # The cached measurement is recorded once (deduplicated), sweeps per level.
    assert keys == [("a", 1, 1), ("a", 1, 2), ("a", 2, 2), ("a", 3, 1), ("b", 1, 2)]
    assert {s["name"] for s in report["servers"]} == {"a", "b"}
    assert all(s["readiness"]["phases"] for s in report["servers"])


def test_bench_without_servers_skips(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "from pytest_sglang import Workload\n"
        "def test_x(sglang_bench):\n    sglang_bench('a', Workload(input_len=1, output_len=1))\n"
    )
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no SGLang server configured*"])


STALLED_SUITE = """
import time
from pytest_sglang import Workload

def test_stalled_streams_are_failed_requests(sglang_bench):
    started = time.monotonic()
    # Every request stalls: allowed here, so that the result can be inspected.
    result = sglang_bench("default", Workload(input_len=8, output_len=16, requests=3, warmup=0),
                          concurrency=3, repeats=1, allow_errors=1.0)
    run = result.runs[0]
    assert run.requests == 3 and run.failed == 3
    assert all(r.error.startswith("stalled: no new token for 0.5 s after 2 token chunks")
               for r in run.records), [r.error for r in run.records]
    assert not result.valid
    assert time.monotonic() - started < 30  # not the 600 s request timeout
"""


def test_stall_timeout_option_bounds_a_stalled_measurement(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    # The emulator's stream stops after its second event and never ends.
    emulator = start_emulator("--emulator-fault", "stall-stream=2")
    pytester.makepyfile(STALLED_SUITE)
    result = pytester.runpytest(f"--sglang-url={emulator.url}", "-osglang_stall_timeout=500ms")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["sglang: request-timeout: 600s (from default); stall-timeout: 0.5s "
         "(from -o sglang_stall_timeout on the command line)"]
    )  # fmt: skip


COUNTERS = """
from pytest_sglang import Workload

def test_counters(sglang_bench):
    result = sglang_bench("a", Workload(input_len=8, output_len=4, requests=6, warmup=3), 2, 2)
    for run in result.runs:
        # The server's own counts cover the measured requests only, not the warm-up.
        assert run.server_counters is not None
        assert run.server_counters["requests"] == 6
        assert run.server_counters["generation_tokens"] == 24
"""


def test_bench_reads_the_servers_own_counters(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    emulator = start_emulator("--enable-metrics")
    pytester.makepyfile(COUNTERS)
    result = pytester.runpytest(f"--sglang-url=a={emulator.url}", "--sglang-report=r.json")
    result.assert_outcomes(passed=1)
    report = json.loads(Path(pytester.path, "r.json").read_text())
    assert report["measurements"][0]["runs"][0]["server_counters"]["requests"] == 6


TELEMETRY = """
import pytest
from pytest_sglang import Workload

@pytest.mark.sglang_profile("fake")
def test_energy(sglang_bench):
    result = sglang_bench("fake", Workload(input_len=16, output_len=32, requests=16), 4, 2)
    for run in result.runs:
        gpu = run.gpu_telemetry
        assert gpu is not None and gpu["energy_source"] == "counter"
        assert gpu["energy_per_token_j"] > 0 and gpu["mean_power_w"] > 100
        assert run.check("gpu_throttled").passed is True
        assert run.check("gpu_foreign_process").passed is True
"""


def test_bench_samples_the_gpus_during_each_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    from pytest_sglang.gpu.probes import write_fake_gpus

    gpus = tmp_path / "gpus"
    write_fake_gpus(gpus, 2)
    pytester.makepyprojecttoml("""
        [tool.pytest-sglang.profiles.fake]
        model-path = "fake/model"
        tp = 2
        args = ["--emulator-load-time", "0", "--emulator-warmup-time", "0",
                "--emulator-health-probe-time", "0", "--emulator-engine", "batch",
                "--emulator-speedup", "20"]
    """)
    pytester.makepyfile(TELEMETRY)
    result = pytester.runpytest("--sglang-launcher=emulator", f"-osglang_gpu_fake={gpus}")
    result.assert_outcomes(passed=1)


NO_GPU_TELEMETRY = """
from pytest_sglang import Workload

def test_no_telemetry(sglang_bench):
    result = sglang_bench("emulated", Workload(input_len=8, output_len=4, requests=4), 2, 1)
    assert result.runs[0].gpu_telemetry is None
    assert result.valid, result.problems()
"""


def test_a_launch_that_holds_no_gpu_gets_no_gpu_telemetry(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An emulator launch without fake GPUs holds none: the host's (throttled) GPUs are not its."""
    from tests.gpu.test_gpu import FAKE_SMI, FAKE_SSH, install

    install(tmp_path, "nvidia-smi", FAKE_SMI)  # GPU-aaaa throttles, pids 4242/4243 hold it
    install(tmp_path, "ssh", FAKE_SSH)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    pytester.makepyprojecttoml("""
        [tool.pytest-sglang.profiles.emulated]
        model-path = "fake/model"
        args = ["--emulator-load-time", "0", "--emulator-warmup-time", "0",
                "--emulator-health-probe-time", "0", "--emulator-speedup", "20"]
    """)
    pytester.makepyfile(NO_GPU_TELEMETRY)
    # The attached server makes the session read GPU state (on its host, gpu-box).
    result = pytester.runpytest(
        "--sglang-launcher=emulator", "--sglang-url=other=http://127.0.0.1:9",
        "-osglang_gpu_host=gpu-box",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
