"""Launch mode under pytest-xdist: each worker launches on its own share of the GPUs.

A fake 8-GPU host, two workers: worker k owns GPUs 4k..4k+3 and pins its launches there
(CUDA_VISIBLE_DEVICES by UUID); the controller's report holds every worker's launches.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from pytest_sglang.gpu.probes import write_fake_gpus

pytest.importorskip("xdist")

pytestmark = pytest.mark.slow

FAST = (
    '"--emulator-load-time", "0", "--emulator-warmup-time", "0", '
    '"--emulator-health-probe-time", "0", "--emulator-decode-ms", "1"'
)


def _profiles(pytester: pytest.Pytester, tp: int = 4) -> None:
    tag = uuid.uuid4().hex[:8]
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.left]
        model-path = "test-{tag}/left"
        tp = {tp}
        args = [{FAST}]

        [tool.pytest-sglang.profiles.right]
        model-path = "test-{tag}/right"
        tp = {tp}
        args = [{FAST}]
    """)


TESTS = """
import pytest
from pytest_sglang import Workload

@pytest.mark.sglang_profile("left")
def test_left(sglang_bench):
    sglang_bench("left", Workload(input_len=8, output_len=4, requests=4), 2, repeats=1)

@pytest.mark.sglang_profile("right")
def test_right(sglang_server):
    assert sglang_server.server_info["tp_size"] == 4
"""


def test_two_workers_launch_on_disjoint_halves_of_eight_gpus(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    uuids = write_fake_gpus(tmp_path / "gpus", 8)
    _profiles(pytester)
    pytester.makepyfile(test_halves=TESTS)
    # --dist each: every worker runs every test, so both launch both profiles, side by side.
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "each", "-p", "no:benchmark", "--sglang-launcher=emulator",
        f"-osglang_gpu_fake={tmp_path / 'gpus'}", "--sglang-report=r.json",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    report = json.loads((pytester.path / "r.json").read_text())
    by_worker: dict[str, set[str]] = {}
    for launch in report["launches"]:
        assert len(launch["gpus"]) == 4, launch
        by_worker.setdefault(launch["worker"], set()).update(launch["gpus"])
    assert sorted(by_worker) == ["gw0", "gw1"]
    assert by_worker["gw0"] <= set(uuids[:4]) and by_worker["gw1"] <= set(uuids[4:])
    assert len(report["launches"]) == 4  # each worker: left once, right once
    # The servers the tests saw were pinned there too (their launch record).
    pinned = {tuple(s["launch"]["gpus"]) for s in report["servers"] if s.get("launch")}
    assert pinned and all(set(g) <= set(uuids[:4]) or set(g) <= set(uuids[4:]) for g in pinned)
    out = result.stdout.str()
    assert "4 server launches in 2 pytest-xdist worker(s)" in out
    result.stdout.fnmatch_lines([f"*[[]gw0[]]*left*on GPUs {uuids[0]}*"])


def test_a_profile_larger_than_a_workers_share_is_refused_with_the_reason(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    write_fake_gpus(tmp_path / "gpus", 8)
    _profiles(pytester, tp=8)
    pytester.makepyfile(test_halves=TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:benchmark", "--sglang-launcher=emulator",
        f"-osglang_gpu_fake={tmp_path / 'gpus'}",
    )  # fmt: skip
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines([
        "*profile '*' needs 8 GPUs (tp=8), but pytest-xdist worker * of 2 owns 4 of the host's"
        " 8 (each worker owns an equal share): run it with fewer workers (-n 1) or without -n*"
    ])  # fmt: skip


def test_more_workers_than_gpus_is_one_startup_error(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    write_fake_gpus(tmp_path / "gpus", 2)
    _profiles(pytester, tp=1)
    pytester.makepyfile(test_halves=TESTS)
    result = pytester.runpytest_subprocess(
        "-n", "3", "-p", "no:benchmark", "--sglang-launcher=emulator",
        f"-osglang_gpu_fake={tmp_path / 'gpus'}",
    )  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest-xdist (-n 3) gives each worker an equal share*shows 2*"])
