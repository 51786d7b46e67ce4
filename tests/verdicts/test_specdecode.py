"""Speculative-decoding arithmetic against DESIGN section 1 and section 7 figures."""

from __future__ import annotations

import json
import math

import pytest

from pytest_sglang.verdicts.specdecode import (
    break_even_accept_length,
    estimate_cycle_time,
    speedup,
)


def test_break_even_from_the_story() -> None:
    # ~30 ms verify cycle against ~12 ms plain decode: 2.5; the story's 2.46 is 29.5 ms.
    assert break_even_accept_length(0.030, 0.012) == pytest.approx(2.5)
    assert round(break_even_accept_length(0.0295, 0.012), 2) == 2.46
    # Units do not matter.
    assert break_even_accept_length(30.0, 12.0) == pytest.approx(2.5)


def test_draft_cost_is_part_of_the_cycle() -> None:
    # Three draft steps of ~2.1 ms (DESIGN section 7 calibration) on top of the verify.
    with_draft = break_even_accept_length(0.030, 0.012, t_draft=3 * 0.0021)
    assert with_draft == pytest.approx(0.0363 / 0.012)
    assert with_draft == break_even_accept_length(0.0363, 0.012)


def test_speedup_at_the_achieved_acceptance() -> None:
    # Achieved 2.0 against a 2.5 break-even: 0.8x.
    assert speedup(2.0, 0.030, 0.012) == pytest.approx(0.8)
    assert speedup(2.0, 0.030, 0.012) == pytest.approx(2.0 / break_even_accept_length(0.030, 0.012))
    assert speedup(2.5, 0.030, 0.012) == pytest.approx(1.0)


def test_story_net_rate_implies_a_longer_cycle() -> None:
    # 54.1 tok/s at acceptance 2.0 against a 12 ms decode step.
    estimate = estimate_cycle_time(spec_tpot=1 / 54.1, base_tpot=0.012, accept_length=2.0)
    assert estimate.t_cycle == pytest.approx(0.03697, abs=1e-5)
    assert estimate.break_even == pytest.approx(3.08, abs=0.01)
    assert estimate.speedup == pytest.approx(0.649, abs=0.001)
    # That cycle is the ~30 ms verify plus three ~2.1 ms draft steps, within 2%.
    assert estimate.t_cycle == pytest.approx(0.030 + 3 * 0.0021, rel=0.02)
    # And the speed-up is consistent with the break-even.
    assert estimate.speedup == pytest.approx(2.0 / estimate.break_even)


def test_single_stream_figures() -> None:
    # EAGLE-3 96.1 tok/s vs baseline 92.6 tok/s at C=1, acceptance length 2.0.
    estimate = estimate_cycle_time(spec_tpot=1 / 96.1, base_tpot=1 / 92.6, accept_length=2.0)
    assert estimate.speedup == pytest.approx(96.1 / 92.6)
    assert estimate.break_even == pytest.approx(2.0 * 92.6 / 96.1)
    assert estimate.t_cycle == pytest.approx(0.02081, abs=1e-5)


def test_design_step_model_reproduces_single_stream_rates() -> None:
    # DESIGN section 7: decode = 9.5 ms + 1.26 ms per token in the batch, draft step
    # 2 ms + 0.1 ms per request; EAGLE-3 with 3 steps verifies 4 tokens per request.
    t_decode = 0.0095 + 0.00126
    t_verify = 0.0095 + 4 * 0.00126
    t_draft = 3 * (0.002 + 0.0001)
    base_rate = 1 / t_decode
    spec_rate = base_rate * speedup(2.0, t_verify, t_decode, t_draft=t_draft)
    assert base_rate == pytest.approx(92.6, rel=0.01)
    assert spec_rate == pytest.approx(96.1, rel=0.01)
    estimate = estimate_cycle_time(spec_tpot=1 / spec_rate, base_tpot=t_decode, accept_length=2.0)
    assert estimate.t_cycle == pytest.approx(t_verify + t_draft)


def test_as_dict() -> None:
    estimate = estimate_cycle_time(spec_tpot=0.02, base_tpot=0.012, accept_length=2.0)
    data = estimate.as_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {"t_cycle", "t_decode", "accept_length", "break_even", "speedup"}


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_rejects_bad_times(bad: float) -> None:
    with pytest.raises(ValueError):
        break_even_accept_length(bad, 0.012)
    with pytest.raises(ValueError):
        break_even_accept_length(0.03, bad)
    with pytest.raises(ValueError):
        estimate_cycle_time(spec_tpot=bad, base_tpot=0.012, accept_length=2.0)


def test_rejects_acceptance_below_one_and_negative_draft() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        speedup(0.9, 0.03, 0.012)
    with pytest.raises(ValueError, match="at least 1"):
        estimate_cycle_time(spec_tpot=0.02, base_tpot=0.012, accept_length=0.5)
    with pytest.raises(ValueError, match="t_draft"):
        break_even_accept_length(0.03, 0.012, t_draft=-0.001)
