"""assert_adaptive and recommend_adaptive_config on synthetic sweeps (no server)."""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.emulator.engine.adaptive import AdaptiveSteps, load_config
from pytest_sglang.errors import ComparisonRefused, PerformanceAssertionError
from pytest_sglang.measure.results import Sweep
from pytest_sglang.verdicts.assertions import Verdict, assert_adaptive, recommend_adaptive_config
from tests.bench_data import BASE_CONFIG, SPEC_CONFIG, sweep

BASE = {1: 92.6, 8: 400.0, 32: 700.0}
STEPS_3 = {1: 140.0, 8: 390.0, 32: 380.0}
STEPS_1 = {1: 120.0, 8: 440.0, 32: 560.0}


def make(server: str, medians: dict[int, float], seed: int = 0, **kwargs: Any) -> Sweep:
    """Five runs per level around ``medians``, 1 % noise; one seed draws the same noise."""
    per_level: dict[int, Sequence[float]] = {}
    for level, median in medians.items():
        rng = random.Random(f"{seed}/{level}")
        per_level[level] = [median * rng.lognormvariate(0, 0.01) for _ in range(5)]
    config = SPEC_CONFIG if server != "base" else BASE_CONFIG
    return sweep(server, per_level, config={**config, "max_running_requests": 64}, **kwargs)


def test_adaptive_as_fast_as_the_better_side_everywhere_passes() -> None:
    # Runs like fixed speculation's at C=1 and the baseline's above (the same noise draws).
    adaptive = make("adaptive", {1: 140.0, 8: 400.0, 32: 700.0})
    adaptive = Sweep("adaptive", adaptive.workload, (make("a", STEPS_3, 2).points[0],
                                                      *adaptive.points[1:]))  # fmt: skip
    verdict = assert_adaptive(adaptive, make("base", BASE), make("eagle3", STEPS_3, 2))
    assert verdict.passed
    lines = verdict.table.splitlines()
    assert "eagle3" in lines[2] and "base" in lines[3] and "base" in lines[4]  # the references
    assert "SLOWER" not in verdict.table


def test_slower_levels_are_named_with_how_much() -> None:
    slow = make("adaptive", {8: 320.0, 32: 560.0})
    adaptive = Sweep("adaptive", slow.workload, (make("a", STEPS_3, 2).points[0], *slow.points))
    with pytest.raises(PerformanceAssertionError) as info:
        assert_adaptive(adaptive, make("base", BASE), make("eagle3", STEPS_3, 2))
    message = str(info.value)
    assert "significantly slower" in message and "C=8 (20.0%)" in message
    assert "C=32 (20.0%)" in message and "C=1 " not in message.splitlines()[0]
    rows = message.splitlines()
    assert "not slower" in rows[4]
    assert "SLOWER by 20.0%" in rows[5] and "SLOWER by 20.0%" in rows[6]
    verdict = info.value.verdict
    assert isinstance(verdict, Verdict)
    evidence = verdict.evidence["levels"]
    assert [level["outcome"] for level in evidence] == ["inconclusive", "fail", "fail"]
    # A tolerance of 25 % lets the same runs pass.
    assert assert_adaptive(adaptive, make("base", BASE), make("eagle3", STEPS_3, 2), by=0.75)


def test_sweeps_over_different_levels_are_refused() -> None:
    short = make("adaptive", {1: 140.0, 8: 400.0}, seed=3)
    with pytest.raises(ComparisonRefused, match="different levels"):
        assert_adaptive(short, make("base", BASE), make("eagle3", STEPS_3, 2))


def test_recommendation_picks_the_significant_best_per_level() -> None:
    base = make("base", BASE)
    rec = recommend_adaptive_config(base, {3: make("s3", STEPS_3, 2), 1: make("s1", STEPS_1, 4)})
    assert rec.config == {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]},
                          "32": {"candidate_steps": [0]}}  # fmt: skip
    assert rec.num_steps == 3
    assert [row["steps"] for row in rec.levels] == [3, 1, 0]
    assert rec.levels[0]["medians"][3] == pytest.approx(140.0, rel=0.02)
    assert "1.5" in rec.levels[0]["why"]  # 140 / 92.6
    assert "steps 0" in rec.table() and "config: " in rec.table()
    # SGLang's rules (as the emulator models them) route each level to the chosen steps.
    path_buckets = load_config_text(rec.json())
    routed = AdaptiveSteps(rec.num_steps, path_buckets)
    assert [routed.steps_for(c) for c in (1, 4, 8, 31, 32, 200)] == [3, 3, 1, 1, 0, 0]


def test_speculation_that_does_not_significantly_win_is_turned_off() -> None:
    base = make("base", {1: 100.0, 8: 400.0})
    rec = recommend_adaptive_config(base, {3: make("s3", {1: 100.0, 8: 300.0})})
    assert rec.config == {"1": {"candidate_steps": [0]}}
    assert "not significantly faster" in rec.levels[0]["why"]
    with pytest.raises(ComparisonRefused, match="step counts >= 1"):
        recommend_adaptive_config(base, {0: base})


def load_config_text(text: str) -> dict[int, dict[str, Any]]:
    """The emulator's reading of a config given as text."""
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as file:
        file.write(text)
    try:
        return load_config(file.name)
    finally:
        Path(file.name).unlink()


WHEEL = Path.home() / (
    ".cache/pytest-sglang/real-sglang-0.5.23/venv/lib/python3.11/site-packages/sglang/srt/"
    "speculative/adaptive_spec_params.py"
)


@pytest.mark.skipif(not WHEEL.is_file(), reason="the real tier's SGLang 0.5.23 is not installed")
def test_recommended_json_loads_in_sglangs_own_parser(tmp_path: Path) -> None:
    """Run the wheel's ``_load_adaptive_config`` (extracted from its source) on the JSON."""
    tree = ast.parse(WHEEL.read_text())
    name = "_load_adaptive_config"
    (function,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    namespace: dict[str, Any] = {"json": json, "DEFAULT_ADAPTIVE_CONFIG": {}}
    exec(compile(ast.Module([function], []), str(WHEEL), "exec"), namespace)
    base = make("base", BASE)
    rec = recommend_adaptive_config(base, {3: make("s3", STEPS_3, 2), 1: make("s1", STEPS_1, 4)})
    path = tmp_path / "adaptive.json"
    path.write_text(rec.json())
    _, buckets = namespace["_load_adaptive_config"](str(path))
    assert sorted(buckets) == [1, 8, 32]
    assert buckets[8]["candidate_steps"] == [1]


def test_a_sweep_too_small_to_decide_is_refused_even_where_it_is_not_the_best() -> None:
    base = make("base", BASE)
    one_run: dict[int, Sequence[float]] = {c: [m * 0.5] for c, m in STEPS_1.items()}
    small = sweep("s1", one_run, config={**SPEC_CONFIG, "max_running_requests": 64})
    with pytest.raises(ComparisonRefused, match="runs per side"):
        recommend_adaptive_config(base, {3: make("s3", STEPS_3, 2), 1: small})


def test_a_reference_too_small_to_decide_is_refused_even_where_it_is_not_the_best() -> None:
    # The fixed-step sweep is slower everywhere (never the reference) and has one run a level:
    # a pass against the baseline alone would hide that it was never comparable.
    one_run: dict[int, Sequence[float]] = {c: [m * 0.5] for c, m in STEPS_3.items()}
    small = sweep("eagle3", one_run, config={**SPEC_CONFIG, "max_running_requests": 64})
    with pytest.raises(ComparisonRefused, match="runs per side"):
        assert_adaptive(make("adaptive", BASE, seed=5), make("base", BASE), small)
