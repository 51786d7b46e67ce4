"""Crossover: the lowest level of a sweep where a is no longer significantly better."""

from __future__ import annotations

import json
import random

from pytest_sglang.verdicts.decision import Comparison, Crossover, Outcome, compare

# DESIGN section 1: EAGLE-3 wins single-stream and loses under load.
LEVELS = [1, 2, 5, 10, 30]
SPEEDUP = {1: 1.04, 2: 1.03, 5: 0.95, 10: 0.8, 30: 0.6}


def sweep(speedups: dict[int, float], seed: int = 0) -> tuple[Comparison, ...]:
    rng = random.Random(seed)
    out = []
    for level, speedup in speedups.items():
        base = [92.6 * level * rng.lognormvariate(0, 0.004) for _ in range(5)]
        spec = [92.6 * level * speedup * rng.lognormvariate(0, 0.004) for _ in range(5)]
        out.append(compare(spec, base, larger_is_better=True, label_a="eagle3", label_b="base"))
    return tuple(out)


def crossover(levels: list[int], comparisons: tuple[Comparison, ...]) -> Crossover:
    return Crossover(tuple(levels), comparisons)


def test_story_sweep_crosses_at_five() -> None:
    comparisons = sweep(SPEEDUP)
    result = crossover(LEVELS, comparisons)
    assert [c.outcome for c in comparisons] == [
        Outcome.PASS, Outcome.PASS, Outcome.FAIL, Outcome.FAIL, Outcome.FAIL,
    ]  # fmt: skip
    assert result.level == 5 and result.index == 2 and result.monotone
    text = result.table()
    assert "<- crossover" in text.splitlines()[4]
    assert "crossover: 5" in text


def test_no_crossover_when_every_level_passes() -> None:
    result = crossover([1, 2], sweep({1: 1.1, 2: 1.1}))
    assert result.level is None and result.index is None and result.monotone
    assert "crossover: none" in result.table()


def test_inconclusive_counts_as_not_faster() -> None:
    result = crossover([1, 2, 5], sweep({1: 1.1, 2: 1.0, 5: 1.1}))
    assert result.comparisons[1].outcome is Outcome.INCONCLUSIVE
    assert result.level == 2
    assert not result.monotone
    assert "not monotone" in result.table()


def test_first_level_can_be_the_crossover() -> None:
    assert crossover([1, 2], sweep({1: 0.9, 2: 0.9})).level == 1


def test_as_dict_is_plain_json() -> None:
    result = crossover(LEVELS, sweep(SPEEDUP))
    data = result.as_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["level"] == 5
    assert [entry["level"] for entry in data["levels"]] == LEVELS
    assert data["levels"][0]["outcome"] == "pass"
