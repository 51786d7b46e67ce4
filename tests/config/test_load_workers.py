"""sglang_load_workers and sglang_ray_address: sources, errors, and that sglang_bench
really spreads its load over worker processes with them (issue 16)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sglang.testing import running_emulator

pytestmark = pytest.mark.filterwarnings("default")

SHOWS = """
def test_show(sglang_settings):
    s = sglang_settings
    print("WORKERS", s.load_workers.value, s.load_workers.source)
    print("RAY", s.ray_address.value, s.ray_address.source)
"""


def shown(pytester: pytest.Pytester, *args: str) -> str:
    pytester.makepyfile(test_show=SHOWS)
    result = pytester.runpytest("-s", *args)
    result.assert_outcomes(passed=1)
    return result.stdout.str()


def test_each_source(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    out = shown(pytester)
    assert "WORKERS 1 default" in out and "RAY None default" in out
    pytester.makeini("[pytest]\nsglang_load_workers = 3\nsglang_ray_address = auto\n")
    out = shown(pytester)
    assert "WORKERS 3 ini" in out and "RAY auto ini" in out
    monkeypatch.setenv("PYTEST_SGLANG_RAY_ADDRESS", "ray://10.0.0.5:10001")
    out = shown(pytester, "-osglang_load_workers=2")
    assert "WORKERS 2 -o sglang_load_workers on the command line" in out
    assert "RAY ray://10.0.0.5:10001 environment variable PYTEST_SGLANG_RAY_ADDRESS" in out
    assert "sglang: load: 2 Ray actors on the cluster at ray://10.0.0.5:10001 (from " in out


def test_the_header_says_where_the_load_runs(pytester: pytest.Pytester) -> None:
    assert "sglang: load:" not in shown(pytester)  # one process: the default, not shown
    out = shown(pytester, "-osglang_load_workers=3")
    assert "sglang: load: 3 processes on this host (from -o sglang_load_workers on the " in out


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("-osglang_load_workers=0", "'0' is not a number of workers"),
        ("-osglang_load_workers=two", "'two' is not a number of workers"),
        ("-osglang_load_workers=\u00b2", "'\u00b2' is not a number of workers"),
        ("-osglang_ray_address=head-node", "'head-node' is not a Ray cluster address"),
        ("-osglang_ray_address=head:99999", "'head:99999' is not a Ray cluster address"),
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
    assert ("e.g. 2" if "workers" in key else "ray start --head") in err


SPREAD_SUITE = """
from pytest_sglang import Workload
from pytest_sglang.loadgen import placement

def test_spread(sglang_bench, monkeypatch):
    calls = []
    real = placement.run_sharded

    def spy(plan, processes, **kwargs):  # the real run, counted
        calls.append(processes)
        return real(plan, processes, **kwargs)

    monkeypatch.setattr(placement, "run_sharded", spy)
    result = sglang_bench("default", Workload(input_len=8, output_len=16, requests=24, warmup=2),
                          concurrency=4, repeats=1)
    (run,) = result.runs
    assert calls == [2]
    assert run.failed == 0 and run.completed == 24
    assert run.server_counters is not None  # read by the coordinator around the common start
"""


def test_sglang_bench_runs_on_worker_processes(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makepyfile(SPREAD_SUITE)
    with running_emulator(tmp_path, "--enable-metrics") as emulator:  # /metrics: counters
        result = pytester.runpytest(f"--sglang-url={emulator.url}", "-osglang_load_workers=2")
    result.assert_outcomes(passed=1)


OPEN_SPREAD_SUITE = """
from pytest_sglang import Workload
from pytest_sglang.loadgen import placement

def test_open_spread(sglang_bench, monkeypatch):
    plans = []
    real = placement.run_sharded

    def spy(plan, processes, **kwargs):  # the real run, counted
        plans.append((plan.load.mode, plan.load.rate, plan.load.max_concurrency, processes))
        return real(plan, processes, **kwargs)

    monkeypatch.setattr(placement, "run_sharded", spy)
    result = sglang_bench("default", Workload(input_len=8, output_len=16, requests=30, warmup=2),
                          rate=30.0, arrival="constant", max_concurrency=8, repeats=1)
    (run,) = result.runs
    # One schedule shared by both processes: 30 requests/s in total, not per process.
    assert plans == [("open", 30.0, 8, 2)]
    assert run.failed == 0 and run.completed == 30
    assert run.valid, [c.detail for c in run.checks if c.passed is False]
    # A schedule per process would send 60/s; a slow machine stretches the tail, not the sends.
    assert 15.0 < run.request_throughput < 40.0, run.request_throughput
    assert run.server_counters is not None
"""


def test_sglang_bench_open_loop_runs_on_worker_processes(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    pytester.makepyfile(OPEN_SPREAD_SUITE)
    with running_emulator(tmp_path, "--enable-metrics") as emulator:
        result = pytester.runpytest(f"--sglang-url={emulator.url}", "-osglang_load_workers=2")
    result.assert_outcomes(passed=1)


ONE_RUN = """
from pytest_sglang import Workload

def test_one_run(sglang_bench):
    sglang_bench("default", Workload(input_len=8, output_len=4, requests=2, warmup=0),
                 concurrency=1, repeats=1)
"""


def test_an_unreachable_ray_cluster_is_named_by_where_its_address_came_from(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    pytester.makepyfile(ONE_RUN)
    with running_emulator(tmp_path) as emulator:
        result = pytester.runpytest_subprocess(
            f"--sglang-url={emulator.url}", "-osglang_ray_address=127.0.0.1:1"
        )
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    where = "(from -o sglang_ray_address on the command line)"
    assert f"cannot connect to the Ray cluster at '127.0.0.1:1' {where}" in out, out
    assert "--sglang-ray-address" not in out  # no such option
