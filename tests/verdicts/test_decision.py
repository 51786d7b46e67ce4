"""compare(): the PASS / FAIL / INCONCLUSIVE rule, its orientation and its evidence."""

from __future__ import annotations

import json
import math
import random

import pytest

from pytest_sglang.verdicts.decision import Comparison, Outcome, compare
from pytest_sglang.verdicts.stats import log_spread, min_detectable_ratio

A_FAST = [105.0, 106.0, 107.0, 108.0, 109.0]
B_SLOW = [100.0, 101.0, 102.0, 103.0, 104.0]


def test_clear_win_passes() -> None:
    result = compare(A_FAST, B_SLOW, larger_is_better=True)
    assert result.outcome is Outcome.PASS
    assert result.p_value == pytest.approx(1 / 252)
    assert result.lower_bound > 1.0
    assert result.ratio == pytest.approx(107 / 102, rel=0.01)
    assert result.repeats_needed is None


def test_clear_loss_fails() -> None:
    result = compare(B_SLOW, A_FAST, larger_is_better=True)
    assert result.outcome is Outcome.FAIL
    assert result.p_value_fail == pytest.approx(1 / 252)
    assert result.upper_bound < 1.0


def test_overlap_is_inconclusive_with_advice() -> None:
    a = [100.0, 103.0, 99.0, 104.0, 101.5]
    b = [101.0, 98.5, 102.0, 100.5, 99.5]
    result = compare(a, b, larger_is_better=True)
    assert result.outcome is Outcome.INCONCLUSIVE
    assert result.lower_bound <= 1.0 <= result.upper_bound
    assert result.repeats_needed is not None and result.repeats_needed > 5
    assert result.mde == pytest.approx(min_detectable_ratio(log_spread(a, b), 5, 5))
    assert "runs per side would decide" in result.table()
    assert "afresh" in result.table()


def test_by_is_the_target_ratio() -> None:
    # a is 5% faster than b with little noise.
    rng = random.Random(1)
    b = [100.0 * rng.lognormvariate(0, 0.003) for _ in range(6)]
    a = [105.0 * rng.lognormvariate(0, 0.003) for _ in range(6)]
    assert compare(a, b, larger_is_better=True, by=1.02).outcome is Outcome.PASS
    assert compare(a, b, larger_is_better=True, by=1.10).outcome is Outcome.FAIL
    # "not more than 5% worse" holds for a clearly faster a.
    assert compare(a, b, larger_is_better=True, by=0.95).outcome is Outcome.PASS
    assert compare(a, b, larger_is_better=True, by=1.02).by == 1.02


def test_smaller_is_better_orientation() -> None:
    # a's latency is 20% lower: b / a = 1.25, so a beats b by 1.2 but not by 1.3.
    rng = random.Random(2)
    b = [0.0125 * rng.lognormvariate(0, 0.004) for _ in range(5)]
    a = [0.0100 * rng.lognormvariate(0, 0.004) for _ in range(5)]
    win = compare(a, b, larger_is_better=False, by=1.2)
    assert win.outcome is Outcome.PASS
    assert win.ratio == pytest.approx(1.25, rel=0.02)
    assert win.ratio_label == "b/a"
    assert compare(a, b, larger_is_better=False, by=1.3).outcome is Outcome.FAIL
    assert compare(b, a, larger_is_better=False).outcome is Outcome.FAIL


def test_smaller_is_better_equals_larger_on_reciprocals() -> None:
    rng = random.Random(3)
    for _ in range(100):
        a = [rng.lognormvariate(0, 0.05) for _ in range(rng.randint(3, 7))]
        b = [rng.lognormvariate(0.02, 0.05) for _ in range(rng.randint(3, 7))]
        by = rng.choice([0.95, 1.0, 1.03])
        latency = compare(a, b, larger_is_better=False, by=by)
        rate = compare([1 / x for x in a], [1 / x for x in b], larger_is_better=True, by=by)
        assert latency.outcome is rate.outcome
        assert latency.ratio == pytest.approx(rate.ratio, rel=1e-12)
        assert latency.p_value == pytest.approx(rate.p_value, rel=1e-12)
        assert latency.lower_bound == pytest.approx(rate.lower_bound, rel=1e-12)


def test_verdicts_agree_with_their_evidence() -> None:
    rng = random.Random(4)
    seen = set()
    for _ in range(500):
        n_a, n_b = rng.randint(3, 8), rng.randint(3, 8)
        effect = rng.choice([0.9, 0.97, 1.0, 1.03, 1.1])
        # Coarse rounding creates ties now and then.
        a = [round(effect * rng.lognormvariate(0, 0.04), 2) for _ in range(n_a)]
        b = [round(rng.lognormvariate(0, 0.04), 2) for _ in range(n_b)]
        result = compare(a, b, larger_is_better=True)
        seen.add(result.outcome)
        if result.outcome is Outcome.PASS:
            assert result.p_value <= 0.05 and result.lower_bound > 1.0
        elif result.outcome is Outcome.FAIL:
            assert result.p_value_fail <= 0.05 and result.upper_bound < 1.0
        else:
            assert result.repeats_needed is None or result.repeats_needed >= 3
        if len(set(a + b)) == n_a + n_b:
            # Without ties the test and the bound are the same statement.
            assert (result.p_value <= 0.05) == (result.lower_bound > 1.0)
            assert (result.p_value_fail <= 0.05) == (result.upper_bound < 1.0)
    assert seen == set(Outcome)


def test_false_pass_rate_is_at_most_alpha() -> None:
    rng = random.Random(5)
    trials = 1500
    passes = 0
    for _ in range(trials):
        a = [rng.lognormvariate(0, 0.03) for _ in range(5)]
        b = [rng.lognormvariate(0, 0.03) for _ in range(5)]
        passes += compare(a, b, larger_is_better=True).outcome is Outcome.PASS
    # The exact size at 5 + 5 runs is 12/252 = 0.0476; 3 binomial sd above is 0.064.
    assert passes / trials <= 0.064


def test_power_against_ten_percent_at_cv_three_percent() -> None:
    rng = random.Random(6)
    trials = 400
    passes = sum(
        compare(
            [1.1 * rng.lognormvariate(0, 0.03) for _ in range(5)],
            [rng.lognormvariate(0, 0.03) for _ in range(5)],
            larger_is_better=True,
        ).outcome
        is Outcome.PASS
        for _ in range(trials)
    )
    assert passes / trials > 0.95


def test_refuses_samples_too_small_to_reach_alpha() -> None:
    with pytest.raises(ValueError, match="at least 3 runs per side") as info:
        compare([1.0, 2.0], [1.0, 2.0], larger_is_better=True)
    assert "smallest possible p is 0.167" in str(info.value)
    with pytest.raises(ValueError, match="at least 5 runs per side"):
        compare([1.0] * 4, [2.0] * 4, larger_is_better=True, alpha=0.01)
    with pytest.raises(ValueError, match="at least 3 runs per side"):
        compare([], [1.0, 2.0, 3.0], larger_is_better=True)
    # Unbalanced designs are fine when they can reach alpha: 1/C(20, 1) = 0.05.
    result = compare([200.0], [float(100 + i) for i in range(19)], larger_is_better=True)
    assert result.outcome is Outcome.PASS


@pytest.mark.parametrize("bad", [0.0, -5.0, math.nan, math.inf])
def test_rejects_non_positive_runs(bad: float) -> None:
    with pytest.raises(ValueError, match="positive finite"):
        compare([1.0, 2.0, bad], [1.0, 2.0, 3.0], larger_is_better=True)


def test_rejects_bad_parameters() -> None:
    with pytest.raises(ValueError, match="by"):
        compare(A_FAST, B_SLOW, larger_is_better=True, by=0.0)
    with pytest.raises(ValueError, match="alpha"):
        compare(A_FAST, B_SLOW, larger_is_better=True, alpha=0.5)
    with pytest.raises(ValueError, match="power"):
        compare(A_FAST, B_SLOW, larger_is_better=True, power=0.3)


def test_identical_runs_are_inconclusive_and_cannot_be_settled() -> None:
    result = compare([5.0] * 4, [5.0] * 4, larger_is_better=True)
    assert result.outcome is Outcome.INCONCLUSIVE
    assert (result.p_value, result.p_value_fail) == (1.0, 1.0)
    assert result.mde == 0.0
    assert result.repeats_needed is None
    assert "more runs will not settle it" in result.table()


def test_carries_the_raw_values_and_sizes() -> None:
    a = [3.0, 1.0, 2.0]
    b = [1.5, 0.5, 2.5, 4.0]
    result = compare(a, b, larger_is_better=True)
    assert result.a == (3.0, 1.0, 2.0) and result.b == (1.5, 0.5, 2.5, 4.0)
    assert (result.n_a, result.n_b) == (3, 4)
    assert (result.median_a, result.median_b) == (2.0, 2.0)
    assert result.cv_a == pytest.approx(0.5)


def test_table_shows_every_run_and_the_statistics() -> None:
    result = compare(
        [96.1, 97.0, 95.5, 96.8, 96.4],
        [92.6, 93.1, 92.0, 92.9, 93.4, 92.2],
        larger_is_better=True,
        label_a="eagle3",
        label_b="baseline",
        metric="output_throughput",
    )
    text = result.table()
    for value in ("96.1", "95.5", "92.6", "93.4"):
        assert value in text
    assert "output_throughput (larger is better): eagle3 vs baseline" in text
    assert "median" in text and "96.4" in text and "92.75" in text
    assert "eagle3/baseline (Hodges-Lehmann)" in text
    assert f"{result.p_value:.4g}" in text
    assert text.splitlines()[-1] == "outcome: PASS"
    assert len([line for line in text.splitlines() if line.strip()[:1].isdigit()]) == 6
    assert result.summary().startswith("PASS: eagle3/baseline = 1.039 > 1 (")


def test_summary_for_each_outcome() -> None:
    assert compare(B_SLOW, A_FAST, larger_is_better=True).summary().startswith("FAIL: a/b")
    text = compare([1.0, 1.2, 0.9], [1.1, 0.95, 1.05], larger_is_better=True).summary()
    assert text.startswith("INCONCLUSIVE: a/b") and "smallest detectable effect" in text


def test_as_dict_is_plain_json() -> None:
    result = compare(A_FAST, B_SLOW, larger_is_better=True, label_a="x", label_b="y")
    data = result.as_dict()
    assert json.loads(json.dumps(data, allow_nan=False)) == data
    assert data["outcome"] == "pass"
    assert data["a"] == A_FAST and data["n_b"] == 5
    for key in (
        "median_a", "median_b", "ratio", "lower_bound", "upper_bound", "confidence",
        "p_value", "p_value_fail", "mde", "repeats_needed", "by", "alpha", "larger_is_better",
    ):  # fmt: skip
        assert key in data


def test_comparison_is_frozen() -> None:
    result = compare(A_FAST, B_SLOW, larger_is_better=True)
    assert isinstance(result, Comparison)
    with pytest.raises(AttributeError):
        result.outcome = Outcome.FAIL  # type: ignore[misc]
