"""JUnit XML (issue 17): concise properties per test, the full evidence in the JSON report.

The XML is read back with junitparser, the parser CI test reporters use (for example the
publish-unit-test-result action), and checked property by property: no value over 500
characters, JSON wherever a value is structured (never a Python repr), no planted secret
anywhere in the file; the collector and the baseline gate still get every entry, with and
without pytest-xdist.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.cli import validate_report
from pytest_sglang.config.redaction import Redactor
from pytest_sglang.report.entries import Entry
from pytest_sglang.report.junit import MAX_VALUE_CHARS, concise_properties, json_value
from pytest_sglang.testing import EmulatorProcess
from tests.faults.harness import FAST, leftovers, new_tag

junitparser = pytest.importorskip("junitparser")

#: Names whose values are JSON (an object or a list), by prefix.
STRUCTURED = ("sglang.verdict.", "sglang.server.", "sglang.server_failure.", "sglang.workload",
              "sglang.gpus")  # fmt: skip


def read_junit(path: Path) -> dict[str, dict[str, str]]:
    """Parse ``path`` as a CI reporter does; return each test case's properties by name.

    Checks every property on the way: at most 500 characters, JSON where structured, no
    Python repr.
    """
    xml = junitparser.JUnitXml.fromfile(str(path))
    cases: dict[str, dict[str, str]] = {}
    for suite in xml if isinstance(xml, junitparser.JUnitXml) else [xml]:
        for case in suite:
            props: dict[str, str] = {}
            for node in ET.fromstring(case.tostring()).iter("property"):
                name, value = node.get("name", ""), node.get("value", "")
                assert len(value) <= MAX_VALUE_CHARS, (name, len(value))
                assert name not in props, f"{case.name}: {name} given twice"
                assert "{'" not in value and "': " not in value, f"a repr in {name}: {value}"
                if name.startswith(STRUCTURED):
                    assert isinstance(json.loads(value), (dict, list)), (name, value)
                props[name] = value
            cases[case.name] = props
    return cases


# -- the properties, unit by unit -----------------------------------------------------------


def _measurement(server: str, concurrency: int, rates: list[float], **workload: Any) -> Entry:
    return {
        "record": "measurement", "server": server, "url": "http://h:1",
        "workload": {"endpoint": "generate", "input_len": 8, "output_len": 4, "requests": 4,
                     **workload},
        "concurrency": concurrency, "schedule": "blocks", "config": {},
        "runs": [{"output_throughput": r, "ttft": {"p50": 0.0125}, "itl": {"p50": 0.002},
                  "failed": 1} for r in rates],
    }  # fmt: skip


def _verdict(outcome: str, summary: str = "s", **evidence: Any) -> Entry:
    return {
        "record": "verdict", "kind": "assert_faster", "outcome": outcome,  # type: ignore[typeddict-item]
        "metric": "output_throughput", "summary": summary, "warnings": [], "table": "t" * 9000,
        "evidence": evidence,
    }  # fmt: skip


def test_headline_figures_and_the_worst_verdict() -> None:
    comparison = {"ratio": 1.0712345, "lower_bound": 1.01, "p_value": 0.0039, "a": [1.0] * 500}
    entries = [
        _measurement("eagle3", 1, [96.0, 96.2, 95.9]),
        _measurement("baseline", 1, [92.6, 92.0, 93.1]),
        _measurement("baseline", 1, [92.6, 92.0, 93.1]),  # cached: recorded again
        _verdict("pass", comparison=comparison),
        _verdict("inconclusive"),
    ]
    props = dict(concise_properties(entries, Redactor()))
    assert props["sglang.verdict"] == "inconclusive"  # the worst of pass and inconclusive
    first = json.loads(str(props["sglang.verdict.1"]))
    assert first == {
        "kind": "assert_faster", "outcome": "pass", "metric": "output_throughput",
        "ratio": 1.0712, "lower_bound": 1.01, "p_value": 0.0039, "summary": "s",
    }  # fmt: skip
    assert props["sglang.eagle3.c1.output_tok_s"] == "96.0"
    assert props["sglang.baseline.c1.ttft_p50_ms"] == "12.5"
    assert props["sglang.baseline.c1.runs"] == "3" and props["sglang.baseline.c1.errors"] == "3"
    assert json.loads(str(props["sglang.workload"]))["input_len"] == 8
    assert not any("table" in str(v) for v in props.values())  # the evidence stays in JSON


def test_two_workloads_are_told_apart() -> None:
    entries = [_measurement("a", 2, [10.0]), _measurement("a", 2, [20.0], input_len=16)]
    props = dict(concise_properties(entries, Redactor()))
    assert props["sglang.a.w1.c2.output_tok_s"] == "10.0"
    assert props["sglang.a.w2.c2.output_tok_s"] == "20.0"
    assert json.loads(str(props["sglang.workload.w2"]))["input_len"] == 16


def test_long_values_are_clipped_json_and_secrets_are_redacted() -> None:
    redact = Redactor(["sk-secret-123"])
    summary = "assert_faster: " + "x" * 2000 + " key sk-secret-123"
    value = json_value({"summary": summary, "api_key": "plain", "n": 1.5}, redact)
    assert len(value) <= MAX_VALUE_CHARS
    parsed = json.loads(value)
    assert parsed["summary"].startswith("assert_faster: xxx") and parsed["summary"].endswith("…")
    assert parsed["api_key"] == "***" and parsed["n"] == 1.5
    props = concise_properties([_verdict("fail", summary=summary)], redact)
    assert all(len(str(v)) <= MAX_VALUE_CHARS for _, v in props)
    assert "sk-secret-123" not in json.dumps(props)
    # Nothing long enough to shorten: still valid JSON within the limit.
    assert json.loads(json_value(list(range(400)), Redactor()))["clipped"] is True


# -- end to end: launch mode against the emulator -------------------------------------------

SECRETS = {"profile --api-key": "sk-junit-key-4711", "profile HF_TOKEN": "hf_junit_token_5813",
           "--sglang-api-key": "sk-junit-cli-9001"}  # fmt: skip

SUITE = """
import pytest
from pytest_sglang import Workload, assert_faster
from bench_data import result

W = Workload(input_len=8, output_len=4, requests=4)
# The verdicts judge synthetic runs (tests/bench_data.py): their outcome never depends on how
# fast a crowded machine ran the emulator, whose measurements are real.
FAST = [110.0, 111.0, 112.5, 113.0, 114.2]
SLOW = [100.0, 101.0, 102.5, 103.0, 104.1]

@pytest.mark.sglang_profile("a")
def test_fast_enough(sglang_bench):
    sglang_bench("a", W, concurrency=2, repeats=5)
    assert_faster(result("eagle3", FAST), result("baseline", SLOW))

@pytest.mark.sglang_profile("a")
def test_impossibly_fast(sglang_bench):
    sglang_bench("a", W, concurrency=2, repeats=5)
    assert_faster(result("eagle3", SLOW), result("baseline", FAST))

@pytest.mark.sglang_profile("a")
def test_two_workloads(sglang_bench):
    sglang_bench("a", W, concurrency=[1, 2], repeats=1)
    sglang_bench("a", Workload(input_len=16, output_len=4, requests=4), concurrency=1, repeats=1)

@pytest.mark.sglang_profile("dies")
def test_launch_fails(sglang_server):
    pass

def test_no_server(request):
    request.node.user_properties.append(("mine", "kept"))
"""


@pytest.mark.slow
def test_junit_from_a_launch_run(pytester: pytest.Pytester) -> None:
    tag = new_tag()
    fast = ", ".join(json.dumps(a) for a in FAST)
    key, token = SECRETS["profile --api-key"], SECRETS["profile HF_TOKEN"]
    pytester.makepyprojecttoml(f"""
        [tool.pytest-sglang.profiles.a]
        model-path = "test-{tag}/a"
        args = [{fast}, "--api-key", "{key}"]
        env = {{ HF_TOKEN = "{token}" }}

        [tool.pytest-sglang.profiles.dies]
        model-path = "test-{tag}/dies"
        args = [{fast}, "--emulator-fault", "crash-in-warmup", "--api-key", "{key}"]
        env = {{ HF_TOKEN = "{token}" }}
    """)
    pytester.makepyfile(test_suite=SUITE)
    pytester.makepyfile(bench_data=Path(__file__).parents[1].joinpath("bench_data.py").read_text())
    result = pytester.runpytest(
        "--sglang-launcher=emulator", f"--sglang-api-key={SECRETS['--sglang-api-key']}",
        "--junitxml=j.xml", "--sglang-report=r.json", "-p", "no:randomly",
    )  # fmt: skip
    result.assert_outcomes(passed=3, failed=1, errors=1)
    text = (pytester.path / "j.xml").read_text()
    for what, secret in SECRETS.items():
        assert secret not in text, f"the {what} is in the JUnit XML"
    cases = read_junit(pytester.path / "j.xml")

    fast_enough = cases["test_fast_enough"]
    assert fast_enough["sglang.verdict"] == "pass"
    assert json.loads(fast_enough["sglang.verdict.1"])["kind"] == "assert_faster"
    assert float(fast_enough["sglang.a.c2.output_tok_s"]) > 0
    assert fast_enough["sglang.a.c2.runs"] == "5"
    server = json.loads(fast_enough["sglang.server.a"])
    assert server["url"].startswith("http://127.0.0.1:") and server["model"]
    assert cases["test_impossibly_fast"]["sglang.verdict"] == "fail"
    two = cases["test_two_workloads"]
    assert {"sglang.a.w1.c1.runs", "sglang.a.w1.c2.runs", "sglang.a.w2.c1.runs"} <= set(two)
    assert "sglang.verdict" not in two
    failure = json.loads(cases["test_launch_fails"]["sglang.server_failure.dies"])
    assert failure["error"] and failure["message"]
    assert cases["test_no_server"] == {"mine": "kept"}

    # The full evidence went to the JSON report all the same.
    document = json.loads((pytester.path / "r.json").read_text())
    assert validate_report(document) == []
    assert [v["outcome"] for v in document["verdicts"]] == ["pass", "fail"]
    assert len(document["measurements"]) == 4 and len(document["measurements"][0]["runs"]) == 5
    assert [f["server"] for f in document["server_failures"]] == ["dies"]
    assert leftovers(tag, document) == []


# -- end to end: pytest-xdist, and the baseline gate's verdicts -------------------------------


@pytest.fixture
def synthetic(pytester: pytest.Pytester) -> pytest.Pytester:
    """The report tests' suite: synthetic results recorded as sglang_bench records them."""
    pytest.importorskip("xdist")
    here = Path(__file__).parent
    suite = here.joinpath("test_report.py").read_text()
    start = suite.index('SUITE = """') + len('SUITE = """')
    pytester.makepyfile(test_suite=suite[start : suite.index('"""', start)])
    pytester.makepyfile(bench_data=here.parent.joinpath("bench_data.py").read_text())
    return pytester


@pytest.mark.slow
def test_junit_under_xdist_with_the_baseline_gate(synthetic: pytest.Pytester) -> None:
    first = synthetic.runpytest("-n", "2", "--sglang-save=base", "--junitxml=save.xml")
    first.assert_outcomes(passed=2, failed=1)
    saved = read_junit(synthetic.path / "save.xml")
    assert saved["test_c1"]["sglang.verdict"] == "pass"
    assert saved["test_crossover"]["sglang.verdict"] == "finding"
    assert json.loads(saved["test_crossover"]["sglang.verdict.1"])["level"] == 10
    assert saved["test_c250_fails"]["sglang.verdict"] == "fail"
    assert float(saved["test_c1"]["sglang.eagle3.c1.output_tok_s"]) == 112.5

    second = synthetic.runpytest(
        "-n", "2", "--sglang-compare=base", "--junitxml=compare.xml", "--sglang-report=r.json"
    )
    second.assert_outcomes(passed=2, failed=1)
    compared = read_junit(synthetic.path / "compare.xml")
    # The gate judged each measurement against its stored twin; JUnit shows its verdicts.
    kinds = [json.loads(v)["kind"] for k, v in compared["test_c1"].items()
             if k.startswith("sglang.verdict.")]  # fmt: skip
    assert kinds == ["assert_faster", "assert_no_regression", "assert_no_regression"]
    document = json.loads((synthetic.path / "r.json").read_text())
    assert validate_report(document) == []
    regressions = [v for v in document["verdicts"] if v["kind"] == "assert_no_regression"]
    assert len(regressions) == 8  # each measurement each test recorded: 2 + 4 + 2
    assert len(document["measurements"]) == 6


ATTACHED_SUITE = """
import pytest
from pytest_sglang import Workload, assert_faster
from bench_data import result

W = Workload(input_len=8, output_len=4, requests=4)

@pytest.mark.parametrize("level", [1, 2])
def test_measures_both(sglang_bench, level):
    sglang_bench("a", W, concurrency=level, repeats=2)
    sglang_bench("b", W, concurrency=level, repeats=2)
    assert_faster(result("a", [110.0, 111.0, 112.5, 113.0, 114.2]),
                  result("b", [100.0, 101.0, 102.5, 103.0, 104.1]))
"""


@pytest.mark.slow
def test_junit_from_attached_servers_under_xdist(
    pytester: pytest.Pytester, start_emulator: Callable[..., EmulatorProcess]
) -> None:
    pytest.importorskip("xdist")
    key = "sk-junit-xdist-2718"
    a, b = start_emulator("--api-key", key), start_emulator("--api-key", key)
    pytester.makepyfile(test_suite=ATTACHED_SUITE)
    pytester.makepyfile(bench_data=Path(__file__).parents[1].joinpath("bench_data.py").read_text())
    result = pytester.runpytest(
        "-n", "2", f"--sglang-url=a={a.url}", f"--sglang-url=b={b.url}",
        f"--sglang-api-key={key}", "--junitxml=j.xml", "--sglang-report=r.json",
        "-p", "no:benchmark",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    assert key not in (pytester.path / "j.xml").read_text()
    cases = read_junit(pytester.path / "j.xml")
    for level, name in ((1, "test_measures_both[1]"), (2, "test_measures_both[2]")):
        props = cases[name]
        assert props["sglang.verdict"] == "pass"
        for server in ("a", "b"):
            assert props[f"sglang.{server}.c{level}.runs"] == "2"
            assert json.loads(props[f"sglang.server.{server}"])["url"].startswith("http://")
    document = json.loads((pytester.path / "r.json").read_text())
    assert validate_report(document) == []
    assert sorted((m["server"], m["concurrency"]) for m in document["measurements"]) == [
        ("a", 1), ("a", 2), ("b", 1), ("b", 2),
    ]  # fmt: skip
