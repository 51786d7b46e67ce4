"""pytest-xdist and servers: each server measured by one worker at a time, launched once.

The servers' own traces (``--emulator-trace``: when each generation arrived and ended, in
wall-clock time) are the judge: the measurements of one server, whichever worker took them,
never overlap, and a paired comparison holds both of its servers from its first request to
its last. The tests below name their servers only in the call, where pytest cannot see
them: xdist spreads them over the workers, and the per-server lock alone keeps them apart.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from pytest_sglang.emulator.engine.trace import read_trace
from pytest_sglang.testing import EmulatorProcess

pytest.importorskip("xdist")

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

#: A real (batch) engine whose requests take a while: a measurement lasts about a second.
SLOW = ("--emulator-engine", "batch", "--emulator-load-time", "0", "--emulator-speedup", "2")

SPREAD = """
import pytest
from pytest_sglang import Workload

# Undeclared and unmarked: each measurement's prompt length identifies it in the trace.
# "srv" and "alias" are one server under two names.
@pytest.mark.parametrize("n", range(4))
def test_measures(sglang_bench, n):
    name = "srv" if n % 2 else "alias"
    sglang_bench(name, Workload(input_len=20 + n, output_len=24, requests=4), 2, repeats=2)
"""

PAIRED = """
import pytest
from pytest_sglang import Workload

def test_pair(sglang_bench):
    sglang_bench.pair("a", "b", Workload(input_len=20, output_len=24, requests=3), 1, repeats=3)

@pytest.mark.parametrize("n", range(1, 4))
def test_b_alone(sglang_bench, n):
    sglang_bench("b", Workload(input_len=20 + n, output_len=24, requests=4), 2, repeats=2)
"""

Interval = tuple[float, float]


def _intervals(trace: Path) -> dict[int, Interval]:
    """Return, per prompt length, when the server first received and last answered it.

    The gate's probes have prompt lengths of their own, unlike the tests' measurements.
    """
    _, lines, _ = read_trace(trace)
    spans: dict[int, Interval] = {}
    for line in lines:
        if line.get("http_received") is None or not line["t"]:
            continue  # the emulator's own health probes
        start, end = line["http_received"], line["t"][-1]
        first, last = spans.get(line["prompt_tokens"], (start, end))
        spans[line["prompt_tokens"]] = (min(first, start), max(last, end))
    return spans


def _overlapping(spans: Iterable[tuple[str, Interval]]) -> list[str]:
    ordered = sorted(spans, key=lambda span: span[1])
    return [
        f"{a} {ia} overlaps {b} {ib}"
        for (a, ia), (b, ib) in itertools.pairwise(ordered)
        if ib[0] < ia[1]
    ]


def _workers(out: str) -> dict[str, str]:
    """Return the worker that ran each test, from ``-v`` output (``[gw0] ... PASSED id``)."""
    return {test: worker for worker, test in re.findall(r"\[(gw\d+)\].* PASSED (\S+)", out)}


def _traced(start: Callable[..., EmulatorProcess], trace: Path) -> EmulatorProcess:
    return start(*SLOW, "--emulator-trace", str(trace), wait="ready")


def test_two_workers_never_measure_one_server_at_once(
    pytester: pytest.Pytester, start_emulator: Callable[..., EmulatorProcess], tmp_path: Path
) -> None:
    trace = tmp_path / "srv.jsonl"
    server = _traced(start_emulator, trace)
    pytester.makepyfile(test_spread=SPREAD)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-v", "-p", "no:benchmark", f"--sglang-url=srv={server.url}",
        f"--sglang-url=alias={server.url}/",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    server.stop()
    spans = _intervals(trace)
    measured = [(f"input_len={n}", spans[n]) for n in (20, 21, 22, 23)]
    assert _overlapping(measured) == []
    workers = set(_workers(result.stdout.str()).values())
    assert workers == {"gw0", "gw1"}, "the measurements did not spread over both workers"


def test_a_pair_holds_both_servers_for_its_whole_duration(
    pytester: pytest.Pytester, start_emulator: Callable[..., EmulatorProcess], tmp_path: Path
) -> None:
    traces = {name: tmp_path / f"{name}.jsonl" for name in ("a", "b")}
    servers = {name: _traced(start_emulator, trace) for name, trace in traces.items()}
    pytester.makepyfile(test_paired=PAIRED)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:benchmark",
        *(f"--sglang-url={name}={server.url}" for name, server in servers.items()),
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    for server in servers.values():
        server.stop()
    a, b = _intervals(traces["a"]), _intervals(traces["b"])
    pair = (min(a[20][0], b[20][0]), max(a[20][1], b[20][1]))
    alone = [(f"b input_len={n}", b[n]) for n in (21, 22, 23)]
    assert _overlapping([("the pair", pair), *alone]) == []


def _profiles(pytester: pytest.Pytester) -> None:
    tag = uuid.uuid4().hex[:8]
    fast = '"--emulator-load-time", "0", "--emulator-warmup-time", "0", "--emulator-decode-ms", "1"'
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.baseline]
        model-path = "test-{tag}/model"
        args = [{fast}]

        [tool.pytest-sglang.profiles.eagle3]
        extends = "baseline"
        args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]

        [tool.pytest-sglang.profiles.alone]
        model-path = "test-{tag}/alone"
        args = [{fast}]
    """)


LAUNCH_GROUPS = """
import pytest
from pytest_sglang import Workload

CHAT = Workload(input_len=16, output_len=8, requests=8)

@pytest.mark.sglang_measure("baseline", "eagle3", workload=CHAT, concurrency=[1, 4], repeats=2)
@pytest.mark.parametrize("level", [1, 4])
def test_compare(sglang_bench, level):
    base, spec = sglang_bench.pair("baseline", "eagle3", CHAT, level, repeats=2)

@pytest.mark.sglang_profile("eagle3")
def test_eagle3_serves(sglang_server):
    assert sglang_server.server_info["speculative_algorithm"] == "EAGLE3"

@pytest.mark.sglang_profile("baseline")
def test_baseline_serves(sglang_server):
    assert sglang_server.server_info["speculative_algorithm"] is None

@pytest.mark.sglang_profile("alone")
@pytest.mark.parametrize("n", range(3))
def test_alone(sglang_bench, n):
    sglang_bench("alone", CHAT, 2, repeats=1)
"""


def test_each_profile_is_launched_once_under_two_workers(pytester: pytest.Pytester) -> None:
    _profiles(pytester)
    pytester.makepyfile(test_groups=LAUNCH_GROUPS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-v", "-p", "no:benchmark", "--sglang-launcher=emulator",
        "--sglang-report=r.json",
    )  # fmt: skip
    result.assert_outcomes(passed=7)
    report = json.loads((pytester.path / "r.json").read_text())
    launched = sorted(launch["profile"] for launch in report["launches"])
    assert launched == ["alone", "baseline", "eagle3"], launched
    # Each launch group ran on one worker: the one that launched its profiles.
    worker_of = {launch["profile"]: launch["worker"] for launch in report["launches"]}
    assert worker_of["baseline"] == worker_of["eagle3"]
    by_profile: dict[str, set[str]] = {}
    for test, worker in _workers(result.stdout.str()).items():
        by_profile.setdefault("alone" if "alone" in test else "baseline", set()).add(worker)
    assert by_profile == {"alone": {worker_of["alone"]}, "baseline": {worker_of["baseline"]}}
    measured = sorted((m["server"], m["concurrency"]) for m in report["measurements"])
    assert measured.count(("baseline", 4)) == measured.count(("eagle3", 4)) == 1, measured
    # Each worker's part of the launch summary says, as the controller's would, what it skipped.
    result.stdout.fnmatch_lines(["*[[]gw?[]]  GPU checks skipped: the emulator launcher holds*"])


DEFAULT_SERVER = """
import pytest

# They name no server: they get the only one, so they run on its worker.
@pytest.mark.parametrize("n", range(6))
def test_uses_the_default(sglang_server, n):
    assert sglang_server.name == "srv"

@pytest.mark.parametrize("n", range(6))
def test_needs_no_server(n):
    pass
"""


def test_tests_of_the_default_server_run_on_one_worker(
    pytester: pytest.Pytester, start_emulator: Callable[..., EmulatorProcess]
) -> None:
    server = start_emulator()
    pytester.makepyfile(test_default=DEFAULT_SERVER)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-v", "-p", "no:benchmark", f"--sglang-url=srv={server.url}"
    )  # fmt: skip
    result.assert_outcomes(passed=12)
    workers = _workers(result.stdout.str())
    assert len({w for test, w in workers.items() if "uses_the_default" in test}) == 1, workers
    # The other tests are spread as xdist spreads them, with no test id changed.
    assert len(set(workers.values())) == 2 and all("@" not in test for test in workers)
    result.stdout.fnmatch_lines(["scheduling tests via LaunchGroupScheduling"])


XDIST_GROUPS = """
import pytest

# No server named: xdist's own group marks alone tie them.
@pytest.mark.xdist_group("first")
@pytest.mark.parametrize("n", range(4))
def test_first(n):
    pass

@pytest.mark.xdist_group(name="second")
@pytest.mark.parametrize("n", range(4))
def test_second(n):
    pass
"""


def test_tests_of_one_xdist_group_run_on_one_worker(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_marked=XDIST_GROUPS)
    # A server is configured (the scheduler by launch group is on); no test reaches it.
    result = pytester.runpytest_subprocess(
        "-n", "2", "-v", "-p", "no:benchmark", "--sglang-url=srv=http://127.0.0.1:9"
    )  # fmt: skip
    result.assert_outcomes(passed=8)
    workers = _workers(result.stdout.str())
    for group in ("test_first", "test_second"):
        assert len({w for test, w in workers.items() if group in test}) == 1, workers


@pytest.mark.parametrize("dist", ["loadscope", "loadfile", "worksteal"])
def test_a_distribution_that_splits_servers_is_a_usage_error(
    pytester: pytest.Pytester, dist: str
) -> None:
    _profiles(pytester)
    pytester.makepyfile(test_groups=LAUNCH_GROUPS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", dist, "-p", "no:benchmark", "--sglang-launcher=emulator"
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--dist {dist} would spread the tests of one SGLang server over several pytest-xdist "
        "workers*use -n N alone (or --dist load)*"
    ])  # fmt: skip
    assert "Traceback" not in result.stderr.str()


def test_the_story_under_two_workers_has_the_verdicts_of_one(pytester: pytest.Pytester) -> None:
    # The example story as it ships (its C=1 tests: both servers, seven runs each), launched
    # on the emulator; only the automatic save of a baseline is off.
    pytester.makepyfile(test_story=(EXAMPLES / "test_story.py").read_text())
    shipped = (EXAMPLES / "pyproject.toml").read_text()
    assert 'sglang_save = "auto"' in shipped
    (pytester.path / "pyproject.toml").write_text(shipped.replace('sglang_save = "auto"', ""))
    reports = {}
    for workers in ("0", "2"):
        result = pytester.runpytest_subprocess(
            "-n", workers, "-k", "single_stream or break_even", "-p", "no:randomly",
            "-p", "no:benchmark", "--sglang-launcher=emulator", f"--sglang-report=r{workers}.json",
        )  # fmt: skip
        result.assert_outcomes(passed=2)
        reports[workers] = json.loads((pytester.path / f"r{workers}.json").read_text())
    verdicts = {
        workers: {(v["test"], v["kind"]): v for v in report["verdicts"]}
        for workers, report in reports.items()
    }
    assert verdicts["2"].keys() == verdicts["0"].keys() and verdicts["0"]
    for key, alone in verdicts["0"].items():
        shared = verdicts["2"][key]
        assert shared["outcome"] == alone["outcome"], (shared["summary"], alone["summary"])
        if "comparison" in alone["evidence"]:  # within noise: the verdicts say how much
            ratio, ratio_alone = (v["evidence"]["comparison"]["ratio"] for v in (shared, alone))
            assert abs(ratio / ratio_alone - 1) < 0.05, (shared["summary"], alone["summary"])
    # Each profile launched once, by one worker, which took its measurements once.
    launches = reports["2"]["launches"]
    assert sorted(launch["profile"] for launch in launches) == ["baseline", "eagle3"]
    assert len({launch["worker"] for launch in launches}) == 1
