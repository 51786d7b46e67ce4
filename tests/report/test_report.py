"""The results report: terminal tables, the JSON file, interrupted runs and xdist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.server.schemas import violations

# Inner tests record synthetic results the way sglang_bench and the verdicts do.
SUITE = """
import pytest
from pytest_sglang import assert_faster, find_crossover
from pytest_sglang.report.entries import record
from bench_data import result, sweep

FAST = [110.0, 111.0, 112.5, 113.0, 114.2]
SLOW = [100.0, 101.0, 102.5, 103.0, 104.1]

def measured(*results):
    for r in results:
        record({"record": "measurement", **r.as_dict()})

def test_c1():
    spec, base = result("eagle3", FAST, accept=2.0), result("baseline", SLOW)
    measured(spec, base)
    assert_faster(spec, base)

def test_crossover():
    spec = sweep("eagle3", {1: FAST, 10: SLOW})
    base = sweep("baseline", {1: SLOW, 10: FAST})
    measured(*spec, *base)
    assert find_crossover(spec, base) <= 10

def test_c250_fails():
    spec, base = result("eagle3", SLOW, concurrency=250), result("baseline", FAST, concurrency=250)
    measured(spec, base)
    assert_faster(spec, base)
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    # The inner tests build their results with this repository's tests/bench_data.py.
    source = Path(__file__).parents[1].joinpath("bench_data.py").read_text()
    pytester.makepyfile(bench_data=source)
    return pytester


def load(path: Path) -> dict[str, Any]:
    document = json.loads(path.read_text())
    assert violations(document, "report") == [], violations(document, "report")
    return document


def test_terminal_table_and_json(suite: pytest.Pytester) -> None:
    result = suite.runpytest("--sglang-report=out/report.json")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines([
        "*= sglang results =*",
        "workload: generate, input 32, output 4 tokens, 2 requests; medians over runs, times in ms",
        "server * C runs  out tok/s  TTFT p50  TTFT p99  ITL p50  accept errors",
        "baseline * 1    5      102.5*",
        "eagle3 * 1    5      112.5*2.00*",
        "[[]PASS[]] test_suite.py::test_c1: assert_faster(eagle3 @ C=1, baseline @ C=1): PASS*",
        "[[]CROSSOVER[]] test_suite.py::test_crossover: crossover of eagle3 vs baseline: C=10",
        "*<- crossover",
        "[[]FAIL[]] test_suite.py::test_c250_fails: *",
        "*report written to*report.json",
    ])  # fmt: skip
    document = load(suite.path / "out" / "report.json")
    assert document["complete"] is True and document["interrupted"] is False
    # A crossover is a finding, reported and not judged.
    assert [v["outcome"] for v in document["verdicts"]] == [
        "pass",
        "finding",
        "fail",
    ]  # a crossover is a finding
    assert {(m["server"], m["concurrency"]) for m in document["measurements"]} == {
        ("eagle3", 1), ("baseline", 1), ("eagle3", 10), ("baseline", 10),
        ("eagle3", 250), ("baseline", 250),
    }  # fmt: skip
    assert len(document["measurements"][0]["runs"]) == 5


def test_interrupted_run_leaves_a_valid_report(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_zz_interrupt="def test_stop():\n    raise KeyboardInterrupt\n")
    result = suite.runpytest_subprocess("--sglang-report=report.json", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    document = load(suite.path / "report.json")
    assert document["complete"] is False and document["interrupted"] is True
    assert len(document["verdicts"]) == 3


def test_partial_report_is_valid_while_running(suite: pytest.Pytester) -> None:
    # Written after every test that recorded something: kill -9 leaves the last one.
    suite.makepyfile(
        test_zz_snapshot="""
        import json, pathlib
        def test_snapshot():
            document = json.loads(pathlib.Path("report.json").read_text())
            assert document["complete"] is False
            assert len(document["verdicts"]) == 3
    """
    )
    result = suite.runpytest_subprocess("--sglang-report=report.json")
    result.assert_outcomes(passed=3, failed=1)


def test_xdist_workers_send_results_to_the_controller(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    result = suite.runpytest("-n", "2", "--sglang-report=report.json")
    result.assert_outcomes(passed=2, failed=1)
    document = load(suite.path / "report.json")
    assert sorted(v["test"].split("::")[1] for v in document["verdicts"]) == [
        "test_c1", "test_c250_fails", "test_crossover",
    ]  # fmt: skip
    result.stdout.fnmatch_lines(["*= sglang results =*"])


def test_report_option_rejects_a_directory(pytester: pytest.Pytester) -> None:
    pytester.mkdir("out")
    result = pytester.runpytest("--sglang-report=out")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--sglang-report: 'out' (relative to {pytester.path}) is a directory" in (
        result.stderr.str()
    )


def test_markdown_summary_is_appended(suite: pytest.Pytester) -> None:
    summary = suite.path / "step-summary.md"
    summary.write_text("# an earlier step's summary\n")
    result = suite.runpytest(f"--sglang-markdown={summary}")
    result.assert_outcomes(passed=2, failed=1)
    text = summary.read_text()
    assert text.startswith("# an earlier step's summary\n\n## pytest-sglang results\n")
    lines = text.splitlines()
    header = "| server | C | runs | out tok/s | TTFT p50 | TTFT p99 | ITL p50 | accept | errors |"
    assert header in lines
    assert "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" in lines
    assert any(line.startswith("| baseline | 1 | 5 | 102.5 |") for line in lines)
    assert any(line.startswith("| eagle3 | 250 | 5 | 102.5 |") for line in lines)
    assert any(
        line.startswith("- **PASS** `test_suite.py::test_c1`: assert_faster(") for line in lines
    )
    assert any(line.startswith("- **CROSSOVER** `test_suite.py::test_crossover`") for line in lines)
    assert any(line.startswith("- **FAIL** `test_suite.py::test_c250_fails`") for line in lines)
    assert "  <details><summary>evidence</summary>" in lines
    assert "interrupted" not in text
    # A second step appends its own summary after the first.
    suite.runpytest(f"--sglang-markdown={summary}", "-k", "test_c1")
    assert summary.read_text().count("## pytest-sglang results") == 2


def test_markdown_summary_from_xdist_and_interrupted_runs(suite: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    suite.runpytest("-n", "2", "--sglang-markdown=xdist.md")
    text = (suite.path / "xdist.md").read_text()
    assert text.count("## pytest-sglang results") == 1  # the controller's, not the workers'
    assert text.count("- **") == 3
    suite.makepyfile(test_zz_interrupt="def test_stop():\n    raise KeyboardInterrupt\n")
    result = suite.runpytest_subprocess("--sglang-markdown=stopped.md", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "_The run was interrupted: these are the results up to then._" in (
        (suite.path / "stopped.md").read_text()
    )


def test_markdown_escapes_table_breakers() -> None:
    from pytest_sglang.report.entries import VerdictRow
    from pytest_sglang.report.summary import render_markdown

    verdict: VerdictRow = {"kind": "assert_faster", "outcome": "pass", "test": "t.py::test[a|b]",
                           "summary": "a|b \\ c", "warnings": ["x|y"], "table": "",
                           "metric": "output_throughput", "evidence": {}}  # fmt: skip
    text = render_markdown([], [verdict])
    assert "- **PASS** `t.py::test[a|b]`: a\\|b \\\\ c" in text
    assert "  - warning: x\\|y" in text
    assert render_markdown([], []).endswith("No measurements or verdicts were recorded.\n")


def test_the_table_title_says_when_tok_s_are_an_emulators() -> None:
    from pytest_sglang.report.summary import render_markdown, render_tables
    from tests.bench_data import result

    def server(name: str, launcher: str, args: list[str]) -> dict[str, Any]:
        command = ["python", "-m", "pytest_sglang.emulator", "--port", "1", *args]
        return {"record": "server", "name": name, "url": "http://h:1", "version": "0.5.23",
                "model": "m", "readiness": {}, "config": {},
                "launch": {"launcher": launcher, "command": command}}  # fmt: skip

    servers = [server("baseline", "emulator", ["--emulator-speedup", "20"]),
               server("eagle3", "emulator", ["--emulator-speedup=20"]),
               server("real", "sglang", [])]  # fmt: skip
    rows = [
        {"test": "t", **result(name, [100.0, 101.0]).as_dict()} for name in ("baseline", "eagle3")
    ]
    lines = render_tables(rows, [], servers=servers)  # type: ignore[arg-type]
    assert lines[0].endswith(
        "; medians over runs, times in ms; "
        "emulated at 20x the modelled GPU's speed: baseline, eagle3"
    )
    assert "emulated at 20x the modelled GPU's speed: baseline, eagle3" in render_markdown(
        rows,  # type: ignore[arg-type]
        [],
        servers=servers,  # type: ignore[arg-type]
    )
    real = [{"test": "t", **result("real", [100.0]).as_dict()}]
    assert "emulated" not in render_tables(real, [], servers=servers)[0]  # type: ignore[arg-type]
    # Without the flag the emulator runs its model in real time: still not a GPU's figures.
    plain = [server("baseline", "emulator", [])]
    assert render_tables(rows[:1], [], servers=plain)[0].endswith(  # type: ignore[arg-type]
        "; emulated in real time: baseline"
    )


def test_the_terminal_summary_says_each_warning_and_table_once() -> None:
    from pytest_sglang.report.summary import render_tables

    cap = "eagle3 runs at most 48 requests at once; pin --max-running-requests"
    blocks = "runs measured in blocks (eagle3 then baseline), not interleaved"
    verdicts = [
        {
            "test": "t.py::test_crossover",
            "kind": "find_crossover",
            "outcome": "finding",
            "summary": "crossover: C=2",
            "table": "level table",
            "warnings": [f"C=70, 100: {cap}"],
        },
        {
            "test": "t.py::test_story",
            "kind": "find_crossover",
            "outcome": "finding",
            "summary": "crossover: C=2",
            "table": "level table",
            "warnings": [f"C=70, 100: {cap}"],
        },
        {
            "test": "t.py::test_load",
            "kind": "assert_faster",
            "outcome": "pass",
            "summary": "PASS",
            "table": "",
            "warnings": [f"C=250: {cap}", blocks],
        },
    ]
    lines = render_tables([], verdicts)  # type: ignore[arg-type]
    text = "\n".join(lines)
    assert text.count(cap) == 1 and text.count(blocks) == 1
    assert lines.count("    level table") == 1
    (cap_line,) = [line for line in lines if cap in line]
    assert "C=70, 100, 250" in cap_line
    assert all(test in text for test in ("test_crossover", "test_story", "test_load"))


def test_a_warning_without_levels_is_not_merged_into_one_with_levels() -> None:
    # "x" holds at every level; "C=70: x" at one. One line "C=70: x [a, b]" would tell test a
    # that its warning held at C=70 only.
    from pytest_sglang.report.entries import group_warnings
    from pytest_sglang.report.summary import render_tables

    verdicts = [
        {"test": "a", "kind": "assert_faster", "outcome": "pass", "summary": "PASS",
         "table": "", "warnings": ["x"]},
        {"test": "b", "kind": "assert_faster", "outcome": "pass", "summary": "PASS",
         "table": "", "warnings": ["C=70: x"]},
    ]  # fmt: skip
    lines = render_tables([], verdicts)  # type: ignore[arg-type]
    assert "warning: x [a]" in lines and "warning: C=70: x [b]" in lines
    assert group_warnings(["x", "C=70: x", "C=100: x"]) == ["x", "C=70, 100: x"]


def test_a_cut_measurement_gives_way_to_the_same_one_measured_whole() -> None:
    # A run cut by a timeout is not cached: a later test measures it whole, and the saved
    # baseline and the JSON report keep the whole one.
    from pytest_sglang.report.entries import unique_measurements

    base = {"server": "a", "workload": {"input_len": 8}, "concurrency": 1, "runs": [{}] * 5}
    cut, whole = {**base, "cut": "timeout"}, dict(base)
    assert unique_measurements([cut, whole]) == [whole]
    assert unique_measurements([whole, cut]) == [whole]
    assert unique_measurements([cut]) == [cut]
