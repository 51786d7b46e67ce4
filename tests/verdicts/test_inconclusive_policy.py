"""``--sglang-inconclusive=fail|skip|warn`` (issue 17): what an undecided verdict does to a test.

The verdict is reported as inconclusive whichever the choice (JSON report, JUnit); only the
test's outcome, and so the run's exit status, changes.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.verdicts.assertions import Verdict
from pytest_sglang.verdicts.decision import Outcome

SUITE = """
import pytest
from pytest_sglang import assert_faster
from pytest_sglang.report.entries import record
from bench_data import result

def test_undecided():
    a = result("eagle3", [100.0, 130.0, 90.0, 125.0, 95.0])
    b = result("baseline", [105.0, 92.0, 128.0, 98.0, 110.0])
    verdict = assert_faster(a, b)
    # Only under warn does the test go on.
    record({"record": "gpus", "names": ["went on: " + verdict.outcome.value]})
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(bench_data=Path(__file__).parents[1].joinpath("bench_data.py").read_text())
    return pytester


def _outputs(pytester: pytest.Pytester) -> tuple[dict[str, Any], dict[str, str]]:
    report = json.loads((pytester.path / "r.json").read_text())
    case = next(ET.parse(pytester.path / "j.xml").iter("testcase"))
    props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
    return report, props


@pytest.mark.parametrize(
    ("args", "outcomes", "status"),
    [
        ((), {"failed": 1}, pytest.ExitCode.TESTS_FAILED),
        (("--sglang-inconclusive=fail",), {"failed": 1}, pytest.ExitCode.TESTS_FAILED),
        (("--sglang-inconclusive=skip",), {"skipped": 1}, pytest.ExitCode.OK),
        # The SGLangWarning is matched in the output below: the warnings count would also
        # hold pytest's own (PytestAssertRewriteWarning, depending on what ran before).
        (("--sglang-inconclusive=warn",), {"passed": 1}, pytest.ExitCode.OK),
    ],
)
def test_the_choice_decides_the_outcome_and_the_report_says_inconclusive(
    suite: pytest.Pytester, args: tuple[str, ...], outcomes: dict[str, int], status: int
) -> None:
    # The outer suite turns warnings into errors; a user's run shows them as warnings.
    result = suite.runpytest(
        *args, "--sglang-report=r.json", "--junitxml=j.xml", "-rs", "-W", "default::UserWarning"
    )
    result.assert_outcomes(**outcomes)
    assert result.ret == status
    report, props = _outputs(suite)
    assert [v["outcome"] for v in report["verdicts"]] == ["inconclusive"]
    assert props["sglang.verdict"] == "inconclusive"
    went_on = props.get("sglang.gpus", "")
    assert ("went on: inconclusive" in went_on) == ("warn" in " ".join(args))
    if "skip" in " ".join(args):
        result.stdout.fnmatch_lines(["SKIPPED *inconclusive (--sglang-inconclusive=skip): *"])
    if "warn" in " ".join(args):
        # Attributed to the test's line that called the verdict, not to a line of the package.
        line = SUITE.strip().splitlines().index("    verdict = assert_faster(a, b)") + 1
        result.stdout.fnmatch_lines([
            f"  */test_suite.py:{line}: SGLangWarning: inconclusive (--sglang-inconclusive=warn)*"
        ])  # fmt: skip


def test_ini_and_environment_and_a_bad_value(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.makeini("[pytest]\nsglang_inconclusive = skip\n")
    result = suite.runpytest()
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["sglang: inconclusive: skip (from ini option *"])
    monkeypatch.setenv("PYTEST_SGLANG_INCONCLUSIVE", "warn")
    result = suite.runpytest("-W", "default::UserWarning")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*SGLangWarning: inconclusive (--sglang-inconclusive=warn)*"])
    result = suite.runpytest("--sglang-inconclusive=ignore")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "*--sglang-inconclusive: 'ignore' is not a choice (from --sglang-inconclusive on the "
        "command line); use one of fail, skip, warn",
    ])  # fmt: skip


def test_outside_a_test_it_raises() -> None:
    from pytest_sglang.errors import Inconclusive
    from pytest_sglang.verdicts.assertions import conclude

    verdict = Verdict("assert_faster", Outcome.INCONCLUSIVE, "output_throughput", "s", "t", {})
    with pytest.raises(Inconclusive, match=r"^s\n"):
        conclude(verdict)
