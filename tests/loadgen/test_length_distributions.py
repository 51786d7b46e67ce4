from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sglang.loadgen.prompts import request_body, token_ids
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import running_emulator

RANGE = Workload(input_len=100, output_len=40, requests=200, range_ratio=0.5, warmup=0)


def test_range_ratio_draws_uniform_lengths_like_bench_serving() -> None:
    pairs = [RANGE.lengths("run", i) for i in range(200)]
    assert all(50 <= i <= 100 and 20 <= o <= 40 for i, o in pairs)
    assert len({i for i, _ in pairs}) > 30  # spread over the range, not a constant
    assert pairs == [RANGE.lengths("run", i) for i in range(200)]  # seeded: every server alike
    assert pairs != [RANGE.lengths("repeat-2", i) for i in range(200)]  # a repeat draws anew
    assert len(token_ids(RANGE, "run", 7)) == pairs[7][0]
    assert request_body(RANGE, "run", 7)["sampling_params"]["max_new_tokens"] == pairs[7][1]


def test_fixed_lengths_by_default() -> None:
    assert Workload(input_len=8, output_len=4).lengths("x", 3) == (8, 4)


def test_an_empirical_file_is_sampled_and_capped(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("# input output\n10 5\n20, 7\n5000 9000\n")
    workload = Workload(input_len=1000, output_len=100, lengths_file=str(path))
    seen = {workload.lengths("r", i) for i in range(60)}
    assert seen == {(10, 5), (20, 7), (1000, 100)}
    assert workload.as_dict()["lengths_file"] == str(path)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("10\n", "is not 'INPUT OUTPUT'"),
        ("10 0\n", "two token counts >= 1"),
        ("# only\n", "no length pairs"),
    ],
)
def test_bad_length_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        Workload(input_len=8, output_len=4, lengths_file=str(path))


def test_bad_ratios_are_refused() -> None:
    with pytest.raises(ValueError, match=r"range_ratio must be in \(0, 1\]"):
        Workload(input_len=8, output_len=4, range_ratio=1.5)
    with pytest.raises(ValueError, match="shorter than the shortest prompt"):
        Workload(input_len=100, output_len=4, range_ratio=0.5, prefix_groups=2, prefix_len=60)


def test_a_distribution_runs_exact_per_request_against_the_emulator(tmp_path: Path) -> None:
    workload = Workload(input_len=64, output_len=24, requests=24, range_ratio=0.25, warmup=0)
    with running_emulator(tmp_path) as emulator:
        run = LoadGenerator(emulator.url).run_closed_loop(workload, 4)
    m = measure(run)
    assert m.failed == 0
    assert m.check("output_length").passed is True, m.check("output_length").detail
    assert m.check("input_length").passed is True, m.check("input_length").detail
    assert len({r.output_len for r in run.measured}) > 3
    assert all(r.output_tokens == r.output_len for r in run.measured)
