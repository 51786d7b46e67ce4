"""Sharded CI (issue 17): one report per shard, merged into one report and one Markdown summary.

Two shards of a small suite (``--sglang-shard 1/2`` and ``2/2``: one profile each) run
against the emulator launcher, each writing its own ``--sglang-report``;
``pytest-sglang merge --markdown`` makes one report that validates and one summary that shows
both shards' rows and verdicts.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from pytest_sglang.cli import main, validate_report
from tests.faults.harness import FAST, leftovers, new_tag

SUITE = """
import pytest
from pytest_sglang import Workload, assert_faster
from bench_data import result

W = Workload(input_len=8, output_len=4, requests=4)
# Real measurements; the verdicts judge synthetic runs, whose outcome is fixed.
FAST = [110.0, 111.0, 112.5, 113.0, 114.2]
SLOW = [100.0, 101.0, 102.5, 103.0, 104.1]

@pytest.mark.sglang_profile("left")
def test_left(sglang_bench):
    sglang_bench("left", W, concurrency=2, repeats=2)
    assert_faster(result("left", FAST), result("other", SLOW))

@pytest.mark.sglang_profile("right")
def test_right(sglang_bench):
    sglang_bench("right", W, concurrency=1, repeats=2)
    assert_faster(result("right", FAST), result("other", SLOW))
"""


def test_two_shards_merge_into_one_report_and_one_summary(pytester: pytest.Pytester) -> None:
    tag = new_tag()
    fast = ", ".join(json.dumps(a) for a in FAST)
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.left]
        model-path = "test-{tag}/left"
        args = [{fast}]

        [tool.pytest-sglang.profiles.right]
        model-path = "test-{tag}/right"
        args = [{fast}]
    """)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(bench_data=Path(__file__).parents[1].joinpath("bench_data.py").read_text())
    for shard in ("1", "2"):
        result = pytester.runpytest(
            "--sglang-launcher=emulator", f"--sglang-shard={shard}/2",
            f"--sglang-report=shard{shard}.json",
        )  # fmt: skip
        result.assert_outcomes(passed=1, deselected=1)
        # Each shard launched its own profile, and only that one.
        document = json.loads((pytester.path / f"shard{shard}.json").read_text())
        assert document["environment"]["shard"] == f"{shard}/2"
        launched = [launch["profile"] for launch in document["launches"]]
        assert launched == [{"1": "left", "2": "right"}[shard]]
    summary = pytester.path / "summary.md"
    summary.write_text("# an earlier step\n")
    out = io.StringIO()
    status = main(
        ["merge", str(pytester.path / "merged.json"), str(pytester.path / "shard1.json"),
         str(pytester.path / "shard2.json"), "--markdown", str(summary)],
        out=out,
    )  # fmt: skip
    assert status == 0, out.getvalue()
    merged = json.loads((pytester.path / "merged.json").read_text())
    assert validate_report(merged) == []
    assert {m["server"] for m in merged["measurements"]} == {"left", "right"}
    assert [v["outcome"] for v in merged["verdicts"]] == ["pass", "pass"]
    assert {launch["profile"] for launch in merged["launches"]} == {"left", "right"}
    shards = merged["environment"]["merged_from"]
    assert [s["source"].rsplit("/", 1)[-1] for s in shards] == ["shard1.json", "shard2.json"]
    assert [s["measurements"] for s in shards] == [1, 1]
    assert [s["shard"] for s in shards] == ["1/2", "2/2"] and "shard" not in merged["environment"]

    text = summary.read_text()
    assert text.startswith("# an earlier step\n\n## pytest-sglang results (merged)\n")
    assert "| report | shard | created | complete | exit status | measurements | verdicts |" in text
    assert "shard1.json" in text and "shard2.json" in text
    # Both shards' rows, in the one table of their shared workload, and both verdicts.
    rows = [line for line in text.splitlines() if line.startswith(("| left ", "| right "))]
    assert [row.split(" | ")[1] for row in rows] == ["1", "2"]  # by level: right C=1, left C=2
    assert "`test_suite.py::test_left`" in text and "`test_suite.py::test_right`" in text
    assert leftovers(tag, merged) == []


def test_merge_markdown_to_stdout_and_a_bad_path(pytester: pytest.Pytester) -> None:
    report = {
        "format": "pytest-sglang-report", "version": 1, "complete": True,
        "interrupted": False, "exit_status": 0, "created": "2026-01-01T00:00:00+00:00",
        "updated": "2026-01-01T00:00:00+00:00",
        "environment": {"plugin_version": "0", "python": "3", "pytest": "9", "platform": "x",
                        "sglang_versions": [], "gpus": []},
        "servers": [], "measurements": [], "verdicts": [],
    }  # fmt: skip
    path = pytester.path / "r.json"
    path.write_text(json.dumps(report))
    out = io.StringIO()
    merged = str(pytester.path / "m.json")
    assert main(["merge", merged, str(path), "--markdown", "-"], out=out) == 0
    assert "No measurements or verdicts were recorded." in out.getvalue()
    under_a_file = path / "s.md"  # its folder would be the report file: refused up front
    status = main(["merge", merged, str(path), "--markdown", str(under_a_file)])
    assert status == 2
