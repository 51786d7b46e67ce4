"""Speculative decoding on real SGLang 0.5.23 (CPU): the example story, EAGLE3 served by the plugin.

One inner pytest session on the ``baseline``, ``eagle3`` and ``eagle3-adaptive`` profiles
(``real_sglang/launch_profile.py spec_profiles_toml``) of the planted target/draft pair that
``setup.sh`` builds (``make_spec_models.py``) runs two files. :data:`GREEDY` launches the three
servers, one at a time, each gated by its readiness checks (EAGLE3 on; adaptive speculation
kept on), checks greedy equivalence with the plugin's
:func:`pytest_sglang.assert_greedy_equivalent` (adaptive EAGLE3 against EAGLE3, EAGLE3 against
the baseline) and writes what the servers answered (the accept length SGLang reports must be
the planted one). The example story, ``examples/test_story.py`` itself, at its ``cpu`` size
(``STORY_SCALE=cpu``), runs its four verdicts on the measurements the baseline and EAGLE3
servers took while they were up: EAGLE3 faster and above break-even at C=1, the crossover by
C=8, the baseline faster at C=8. Its outcomes and verdicts are read from the inner session's
JUnit XML.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.real.conftest import RealServers, unavailable
from tests.real.realserver import ENVIRON, REPO, launch_profile

#: Seconds the inner session may take (~5 min on a quiet 2-core machine, 14 min at load 11).
INNER_TIMEOUT = 1500

pytestmark = pytest.mark.timeout(INNER_TIMEOUT + 180)

STORY = REPO / "examples" / "test_story.py"

GREEDY = """
import json
import random

import httpx

from pytest_sglang import assert_greedy_equivalent

#: Prompts of 8-60 word ids (the planted target's vocabulary is 4096: ids 5-4095 are words).
RNG = random.Random(7)
PROMPTS = [[RNG.randrange(5, 4096) for _ in range(RNG.randrange(8, 60))] for _ in range(4)]
TOKENS = 32


def greedy(url, ids):
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": TOKENS,
                                                   "ignore_eos": True}}
    response = httpx.post(url + "/generate", json=body, timeout=300, trust_env=False)
    response.raise_for_status()
    answer = response.json()
    return {"output_ids": answer["output_ids"], "meta_info": answer["meta_info"]}


def test_serve_greedy(sglang_servers):
    # Three launches (one server runs at a time, and each takes the story's declared
    # measurements while it is up): adaptive EAGLE3 against static EAGLE3, then EAGLE3 against
    # the baseline, each with the public verdict (static EAGLE3 is the adaptive one's
    # reference so that no server is launched twice; equality is transitive).
    results = {}
    verdicts = []
    for name, reference in (("eagle3-adaptive", "eagle3"), ("eagle3", "baseline")):
        server = sglang_servers.get(name)
        results[name] = observe(server)
        verdict = assert_greedy_equivalent(
            server, lambda: sglang_servers.get(reference), PROMPTS, max_new_tokens=TOKENS
        )
        verdicts.append(str(verdict.summary))
    results["baseline"] = observe(sglang_servers.get("baseline"), prompts=[])
    results["greedy"] = verdicts
    with open("results.json", "w") as out:
        json.dump(results, out)


def observe(server, prompts=PROMPTS):
    info = httpx.get(server.url + "/server_info", timeout=30, trust_env=False).json()
    return {
        "server_info": {k: info.get(k) for k in (
            "speculative_algorithm", "speculative_adaptive", "speculative_num_steps",
            "speculative_eagle_topk", "speculative_num_draft_tokens",
            "prefill_attention_backend", "decode_attention_backend")},
        "answers": [greedy(server.url, ids) for ids in prompts],
    }
"""


def accept_length(answers: list[dict[str, Any]]) -> float:
    """Tokens per verify cycle over all answers (SGLang's ``spec_verify_ct`` in meta_info)."""
    tokens = sum(a["meta_info"]["completion_tokens"] for a in answers)
    cycles = sum(a["meta_info"]["spec_verify_ct"] for a in answers)
    return tokens / cycles


@pytest.fixture(scope="module")
def spec_pair() -> Path:
    """The planted target/draft pair's folder (``setup.sh`` builds it)."""
    spec = Path(launch_profile.spec_models(ENVIRON))
    if not (spec / "plant.json").is_file():
        unavailable(f"no speculative pair at {spec} (run `bash real_sglang/setup.sh`)")
    return spec


@dataclass(frozen=True)
class SuiteRun:
    """The inner session: its folder, its terminal output and its JUnit XML test cases."""

    folder: Path
    output: str
    cases: dict[str, ET.Element]

    def outcome(self, test: str) -> str:
        """``passed``, ``failed``, ``error``, ``skipped`` or ``not run`` of inner test ``test``."""
        case = self.cases.get(test)
        if case is None:
            return "not run"
        for tag in ("failure", "error", "skipped"):
            if case.find(tag) is not None:
                return {"failure": "failed"}.get(tag, tag)
        return "passed"

    def verdicts(self, test: str) -> list[dict[str, Any]]:
        """The verdicts inner test ``test`` recorded (its ``sglang.verdict.N`` properties)."""
        case = self.cases.get(test)
        found = [] if case is None else case.iterfind("properties/property")
        return [
            json.loads(p.get("value", "{}"))
            for p in found
            if p.get("name", "").startswith("sglang.verdict.")
        ]

    def evidence(self, test: str) -> str:
        """What inner test ``test`` printed and decided, and the session's output, for a failure."""
        case = self.cases.get(test)
        printed = "" if case is None else (case.findtext("system-out") or "")
        summaries = "\n".join(v["summary"] for v in self.verdicts(test))
        return f"{summaries}\n{printed}\n{self.output[-6000:]}"


def run_suite(folder: Path, python_files: list[str]) -> SuiteRun:
    """Run ``python_files`` in an inner pytest session in ``folder`` (``spec.toml`` there)."""
    # Its own ini file keeps examples/pyproject.toml (the GPU story's profiles, the autosave
    # of baselines) out; the files run in the order given, GREEDY's launches first.
    (folder / "pytest.ini").write_text("[pytest]\njunit_logging = system-out\n")
    log = folder / "output.txt"
    with log.open("w") as out:
        inner = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-c", "pytest.ini", "--noconftest",
             "-p", "no:randomly", "-p", "no:cacheprovider",
             "--sglang-profiles=spec.toml", "--junitxml=junit.xml", *python_files, "-rA", "-v"],
            cwd=folder, env={**os.environ, "STORY_SCALE": "cpu"}, stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            inner.wait(timeout=INNER_TIMEOUT)
        except subprocess.TimeoutExpired:
            # SIGTERM: the plugin stops the server it launched and writes what it has.
            inner.terminate()
            try:
                inner.wait(timeout=120)
            except subprocess.TimeoutExpired:
                inner.kill()
                inner.wait()
    junit = folder / "junit.xml"
    cases = (
        {c.get("name", ""): c for c in ET.parse(junit).iter("testcase")} if junit.is_file() else {}
    )
    return SuiteRun(folder, log.read_text(), cases)


@pytest.fixture(scope="module")
def suite(
    real_servers: RealServers, spec_pair: Path, tmp_path_factory: pytest.TempPathFactory
) -> SuiteRun:
    """Run GREEDY and the example story once, in one inner pytest session on the spec profiles."""
    folder = tmp_path_factory.mktemp("spec-suite")
    (folder / "spec.toml").write_text(
        launch_profile.spec_profiles_toml(python=real_servers.tier.python, models=spec_pair)
    )
    (folder / "test_greedy.py").write_text(GREEDY)
    with real_servers.exclusive():
        return run_suite(folder, ["test_greedy.py", str(STORY)])


@pytest.fixture(scope="module")
def served(suite: SuiteRun) -> dict[str, Any]:
    """What the three plugin-launched servers answered to the greedy prompts."""
    assert suite.outcome("test_serve_greedy") == "passed", suite.evidence("test_serve_greedy")
    results: dict[str, Any] = json.loads((suite.folder / "results.json").read_text())
    return results


def test_eagle3_greedy_outputs_equal_baseline(served: dict[str, Any]) -> None:
    # assert_greedy_equivalent (inner test_serve_greedy): adaptive EAGLE3 = EAGLE3 = baseline,
    # token for token; a divergence fails it with the prompt, position and both tokens.
    assert [v.split(":")[0] for v in served["greedy"]] == ["PASS", "PASS"], served["greedy"]


def test_accept_length_is_the_planted_one(served: dict[str, Any], spec_pair: Path) -> None:
    plant = json.loads((spec_pair / "plant.json").read_text())
    expected = plant["expected_accept_length"][str(launch_profile.EAGLE3_STEPS)]
    measured = accept_length(served["eagle3"]["answers"])
    # 4 x 32 tokens ~ 60 cycles: the mean's standard error is ~0.15; the last cycle of each
    # request is cut by max_new_tokens (a little below the planted mean).
    assert expected * 0.8 < measured < expected * 1.1, (measured, expected)
    assert served["baseline"]["server_info"]["speculative_algorithm"] is None


def test_adaptive_server_reports_adaptive_on(served: dict[str, Any]) -> None:
    info = served["eagle3-adaptive"]["server_info"]
    assert info["speculative_adaptive"] is True, info
    assert info["speculative_algorithm"] == "EAGLE3"
    assert (info["speculative_eagle_topk"], info["speculative_num_steps"]) == (1, 3), info
    assert served["eagle3"]["server_info"]["speculative_adaptive"] is False
    assert served["eagle3"]["server_info"]["decode_attention_backend"] == "intel_amx"
    assert accept_length(served["eagle3-adaptive"]["answers"]) > 1.5


@pytest.mark.parametrize(
    "test",
    [
        "test_eagle3_beats_baseline_single_stream",
        "test_acceptance_beats_break_even_at_c1",
        "test_speculation_stops_paying_off",
        "test_baseline_beats_eagle3_under_load",
    ],
)
def test_story_verdict_on_real_sglang(suite: SuiteRun, test: str) -> None:
    # The example's test asserts the verdict itself (an undecided one, Inconclusive, fails
    # it); none of its verdicts may be undecided or failed.
    assert suite.outcome(test) == "passed", suite.evidence(test)
    outcomes = {v["outcome"] for v in suite.verdicts(test)}
    assert outcomes <= {"pass", "finding"}, suite.evidence(test)
