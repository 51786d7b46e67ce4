"""Speculative decoding on the real SGLang 0.5.23 (CPU): EAGLE3 served by the plugin.

The plugin launches ``baseline``, ``eagle3`` and ``eagle3-adaptive`` profiles
(``real_sglang/launch_profile.py spec_profiles_toml``) on the planted target/draft pair that
``setup.sh`` builds (``make_spec_models.py``), one server at a time, each gated by its
readiness checks (EAGLE3 on; adaptive speculation kept on). The inner session checks greedy
equivalence with the plugin's :func:`pytest_sglang.assert_greedy_equivalent` (adaptive EAGLE3
against EAGLE3, EAGLE3 against the baseline), writes what the servers answered (the accept
length SGLang reports must be the planted one), and runs the story's verdicts on the
measurements the baseline and EAGLE3 servers take while they are up: EAGLE3 faster and above
break-even at C=1, the crossover by C=8, the baseline faster at C=8.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.real.conftest import RealServers, unavailable
from tests.real.realserver import ENVIRON, launch_profile

pytestmark = pytest.mark.timeout(900)

SUITE = """
import json
import random

import httpx
import pytest

from pytest_sglang import (
    Workload, assert_faster, assert_greedy_equivalent, estimate_break_even, find_crossover,
)

#: Prompts of 8-60 word ids (the planted target's vocabulary is 4096: ids 5-4095 are words).
RNG = random.Random(7)
PROMPTS = [[RNG.randrange(5, 4096) for _ in range(RNG.randrange(8, 60))] for _ in range(4)]
TOKENS = 32

# The story, scaled to two CPU cores: short prompts, 32 exact output tokens, at least
# STORY_REQUESTS requests per run (one per slot), REPEATS runs per side, LEVELS concurrencies.
# Every test declares all of it, so each server takes it while it is up (see
# real_sglang/README.md for why EAGLE3 pays at C=1 and stops paying by C=8 on this pair).
STORY = Workload(input_len=16, output_len=32, requests=STORY_REQUESTS, requests_per_slot=1)
LEVELS = STORY_LEVELS
REPEATS = STORY_REPEATS


def measures():
    return pytest.mark.sglang_measure(
        "baseline", "eagle3", workload=STORY, concurrency=LEVELS, repeats=REPEATS
    )


def greedy(url, ids):
    body = {"input_ids": ids, "sampling_params": {"temperature": 0, "max_new_tokens": TOKENS,
                                                   "ignore_eos": True}}
    response = httpx.post(url + "/generate", json=body, timeout=300, trust_env=False)
    response.raise_for_status()
    answer = response.json()
    return {"output_ids": answer["output_ids"], "meta_info": answer["meta_info"]}


@measures()
def test_serve_greedy(sglang_servers):
    # Three launches (one server runs at a time, and each takes the declared measurements
    # below while it is up): adaptive EAGLE3 against static EAGLE3, then EAGLE3 against the
    # baseline, each with the public verdict (static EAGLE3 is the adaptive one's reference
    # so that no server is launched twice; equality is transitive).
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
    record("greedy", "\\n".join(verdicts))
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


def record(name, text):
    with open(f"{name}.txt", "w") as out:
        out.write(text)


@measures()
def test_eagle3_beats_baseline_single_stream(sglang_bench):
    base = sglang_bench("baseline", STORY, concurrency=1, repeats=REPEATS)
    spec = sglang_bench("eagle3", STORY, concurrency=1, repeats=REPEATS)
    verdict = assert_faster(spec, base)
    record("faster_c1", str(verdict.summary))


@measures()
def test_speculation_stops_paying_off(sglang_bench):
    base = sglang_bench("baseline", STORY, concurrency=LEVELS, repeats=REPEATS)
    spec = sglang_bench("eagle3", STORY, concurrency=LEVELS, repeats=REPEATS)
    crossover = find_crossover(spec, base)
    record("crossover", crossover.table())
    # Speculation pays at the lowest level and has stopped paying by the next one.
    assert LEVELS[0] < crossover <= LEVELS[1]


@measures()
def test_baseline_beats_eagle3_under_load(sglang_bench):
    base = sglang_bench("baseline", STORY, concurrency=LEVELS[-1], repeats=REPEATS)
    spec = sglang_bench("eagle3", STORY, concurrency=LEVELS[-1], repeats=REPEATS)
    verdict = assert_faster(base, spec)
    record("under_load", str(verdict.summary))


@measures()
def test_acceptance_beats_break_even_at_c1(sglang_bench):
    base = sglang_bench("baseline", STORY, concurrency=1, repeats=REPEATS)
    spec = sglang_bench("eagle3", STORY, concurrency=1, repeats=REPEATS)
    e = estimate_break_even(spec, base)
    record("break_even", json.dumps({"t_cycle": e.t_cycle, "t_decode": e.t_decode,
        "break_even": e.break_even, "accept_length": e.accept_length, "speedup": e.speedup}))
    assert e.accept_length > e.break_even
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


#: The story's runs per side, requests per run (at least one per slot) and concurrency levels,
#: chosen so that the verdicts are decided on two loaded cores (see real_sglang/README.md)
#: within the tier's CI budget.
STORY_REPEATS = 5
STORY_REQUESTS = 4
STORY_LEVELS = [1, 8]


@dataclass(frozen=True)
class SuiteRun:
    """The inner session: its folder (what its tests wrote) and its ``-rA`` output."""

    folder: Path
    output: str

    def outcome(self, test: str) -> str:
        """PASSED / FAILED / ERROR ... of inner test ``test``, from the ``-rA`` summary."""
        for line in self.output.splitlines():
            word, _, rest = line.partition(" ")
            if rest.split(" ")[0] == f"test_spec_suite.py::{test}":
                return word
        return "not run"

    def written(self, name: str) -> str:
        """The text inner test ``name`` recorded (``record``), or why there is none."""
        path = self.folder / f"{name}.txt"
        return path.read_text() if path.is_file() else f"({name}.txt not written)"


@pytest.fixture(scope="module")
def suite(
    real_servers: RealServers, spec_pair: Path, tmp_path_factory: pytest.TempPathFactory
) -> SuiteRun:
    """Run SUITE once in an inner pytest session on the spec profiles."""
    folder = tmp_path_factory.mktemp("spec-suite")
    (folder / "spec.toml").write_text(
        launch_profile.spec_profiles_toml(python=real_servers.tier.python, models=spec_pair)
    )
    code = (
        SUITE.replace("STORY_REPEATS", str(STORY_REPEATS))
        .replace("STORY_REQUESTS", str(STORY_REQUESTS))
        .replace("STORY_LEVELS", str(STORY_LEVELS))
    )
    (folder / "test_spec_suite.py").write_text(code)
    with real_servers.exclusive():
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider",
             "--sglang-profiles=spec.toml", "test_spec_suite.py", "-rA", "-v"],
            cwd=folder, capture_output=True, text=True, timeout=840, check=False,
        )  # fmt: skip
    return SuiteRun(folder, done.stdout + done.stderr)


@pytest.fixture(scope="module")
def served(suite: SuiteRun) -> dict[str, Any]:
    """What the three plugin-launched servers answered to the greedy prompts."""
    assert suite.outcome("test_serve_greedy") == "PASSED", suite.output[-6000:]
    results: dict[str, Any] = json.loads((suite.folder / "results.json").read_text())
    return results


def test_eagle3_greedy_outputs_equal_baseline(suite: SuiteRun) -> None:
    # assert_greedy_equivalent (inner test_serve_greedy): adaptive EAGLE3 = EAGLE3 = baseline,
    # token for token; a divergence fails it with the prompt, position and both tokens.
    assert suite.outcome("test_serve_greedy") == "PASSED", suite.output[-6000:]
    assert suite.written("greedy").count("PASS: ") == 2, suite.written("greedy")


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
    ("test", "record"),
    [
        ("test_eagle3_beats_baseline_single_stream", "faster_c1"),
        ("test_acceptance_beats_break_even_at_c1", "break_even"),
        ("test_speculation_stops_paying_off", "crossover"),
        ("test_baseline_beats_eagle3_under_load", "under_load"),
    ],
)
def test_story_verdict_on_real_sglang(suite: SuiteRun, test: str, record: str) -> None:
    # The inner test asserts the verdict itself; an undecided one (Inconclusive) fails it.
    assert suite.outcome(test) == "PASSED", f"{suite.written(record)}\n{suite.output[-6000:]}"
