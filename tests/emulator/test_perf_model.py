"""The performance model and the batch scheduler, in model time (pure: no sockets, no sleeps)."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from pytest_sglang.emulator.engine.batch_scheduler import (
    DONE,
    BatchScheduler,
    SeqState,
    simulate_closed_loop,
)
from pytest_sglang.emulator.engine.perf_model import (
    DEFAULT_PARAMS,
    PerfParams,
    SpecShape,
    SpeedNoise,
    acceptance_rate,
    break_even_accept_length,
    cycle_ms,
    decode_ms,
    draft_ms,
    draw_accepted,
    expected_cycles,
    prefill_ms,
    single_stream_throughput,
    steady_throughput,
    verify_ms,
)

EAGLE3 = SpecShape(num_steps=3, topk=1, num_draft_tokens=4, accept_length=2.0)
P = DEFAULT_PARAMS


# -- step costs against hand computations ----------------------------------------------------


def test_step_costs_by_hand() -> None:
    assert P == PerfParams(9.52, 1.254, 15.0, 0.05, 1.98, 0.071)
    assert decode_ms(P, 1) == pytest.approx(9.52 + 1.254)
    assert decode_ms(P, 250) == pytest.approx(9.52 + 1.254 * 250)  # 323.02
    assert draft_ms(P, 48) == pytest.approx(1.98 + 0.071 * 48)
    assert draft_ms(P, 4, topk=2) == pytest.approx(1.98 + 0.071 * 8)
    assert verify_ms(P, 48, EAGLE3) == pytest.approx(9.52 + 1.254 * 192)
    assert cycle_ms(P, 1, EAGLE3) == pytest.approx(3 * 2.051 + 9.52 + 1.254 * 4)  # 20.689
    assert cycle_ms(P, 48, EAGLE3) == pytest.approx(3 * 5.388 + 9.52 + 1.254 * 192)  # 266.45
    assert prefill_ms(P, 32) == pytest.approx(15.0 + 1.6)
    assert prefill_ms(P, 32, 1, EAGLE3) == pytest.approx(16.6 + 2.051)


def test_design_constants_are_expressible() -> None:
    design = PerfParams(9.5, 1.26, 0.0, 0.0, 2.0, 0.1)
    assert decode_ms(design, 1) == pytest.approx(10.76)
    assert cycle_ms(design, 1, EAGLE3) == pytest.approx(3 * 2.1 + 9.5 + 5.04)


def test_params_reject_negative_and_nan() -> None:
    with pytest.raises(ValueError, match="step_base_ms"):
        PerfParams(step_base_ms=-1.0)
    with pytest.raises(ValueError, match="draft_per_token_ms"):
        PerfParams(draft_per_token_ms=math.nan)


def test_spec_shape_bounds_the_accept_length() -> None:
    with pytest.raises(ValueError, match="accept_length"):
        SpecShape(3, 1, 4, 4.5)
    with pytest.raises(ValueError, match="positive"):
        SpecShape(0, 1, 4, 2.0)


def test_speculation_wins_single_stream_and_loses_at_48() -> None:
    # Break-even acceptance length (reference Part 3.2): below tau at B=1, far above at B=48.
    assert break_even_accept_length(P, 1, EAGLE3) == pytest.approx(20.689 / 10.774, rel=1e-4)
    assert break_even_accept_length(P, 1, EAGLE3) < 2.0 < break_even_accept_length(P, 48, EAGLE3)
    assert steady_throughput(P, 1, EAGLE3) > steady_throughput(P, 1)
    assert steady_throughput(P, 48, EAGLE3) < 0.6 * steady_throughput(P, 48)


# -- acceptance --------------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [1.0, 1.5, 2.0, 3.2, 4.0])
def test_acceptance_rate_gives_the_mean(tau: float) -> None:
    rate = acceptance_rate(tau, 4)
    assert sum(rate**i for i in range(4)) == pytest.approx(tau, abs=1e-9)


def test_acceptance_rate_for_tau_two_and_four_drafts() -> None:
    # 1 + a + a^2 + a^3 = 2  ->  a = 0.5437 (hand: 0.5437 + 0.2956 + 0.1607 = 1.0000)
    assert acceptance_rate(2.0, 4) == pytest.approx(0.5437, abs=1e-4)


def test_drawn_lengths_average_to_tau_and_stay_in_range() -> None:
    rng = random.Random(7)
    rate = acceptance_rate(2.0, 4)
    draws = [draw_accepted(rng, rate, 4) for _ in range(40000)]
    assert set(draws) == {1, 2, 3, 4}
    assert statistics.fmean(draws) == pytest.approx(2.0, abs=0.03)


def test_expected_cycles() -> None:
    assert expected_cycles(1, EAGLE3) == pytest.approx(1.0)
    always_four = SpecShape(3, 1, 4, 4.0)
    assert expected_cycles(8, always_four) == pytest.approx(2.0)
    assert expected_cycles(9, always_four) == pytest.approx(3.0)  # the last cycle is cut short
    # Long runs: tokens / tau plus a bounded overshoot term.
    assert 255 / 2.0 < expected_cycles(255, EAGLE3) < 255 / 2.0 + 1.0


# -- the calibration targets (DESIGN section 7) ----------------------------------------------


def test_single_stream_closed_forms_hit_the_targets() -> None:
    assert single_stream_throughput(P, 32, 256) == pytest.approx(92.6, rel=0.005)
    assert single_stream_throughput(P, 32, 256, EAGLE3) == pytest.approx(96.1, rel=0.005)
    # By hand: 256 / (16.6 + 255 * 10.774) ms.
    assert single_stream_throughput(P, 32, 256) == pytest.approx(256 / 2.76397, rel=1e-4)


@pytest.mark.parametrize(
    ("concurrency", "spec", "max_running", "requests", "target"),
    [
        (1, None, 2048, 4, 92.6),
        (250, None, 2048, 500, 773.0),
        (1, EAGLE3, 48, 16, 96.1),
        (250, EAGLE3, 48, 500, 354.0),
    ],
    ids=["baseline-c1", "baseline-c250", "eagle3-c1", "eagle3-c250"],
)
def test_simulated_closed_loop_hits_the_targets(
    concurrency: int, spec: SpecShape | None, max_running: int, requests: int, target: float
) -> None:
    result = simulate_closed_loop(
        P,
        concurrency=concurrency,
        requests=requests,
        input_len=32,
        output_len=256,
        max_running=max_running,
        spec=spec,
    )
    assert result.throughput == pytest.approx(target, rel=0.01)
    assert result.output_tokens == requests * 256
    if spec is not None:
        assert result.acceptance_length == pytest.approx(2.0, abs=0.05)


def test_simulated_baseline_c250_is_decode_bound_by_hand() -> None:
    # Two waves: one 8000-token prefill + 255 decode steps at B=250 each, 1 forward for the
    # first arrival's prefill on top (the loop starts one request ahead).
    result = simulate_closed_loop(
        P, concurrency=250, requests=250, input_len=32, output_len=256, max_running=2048
    )
    by_hand = 64000 / ((prefill_ms(P, 8000) + 255 * decode_ms(P, 250)) / 1000)
    assert result.throughput == pytest.approx(by_hand, rel=0.002)


def test_throughput_grows_with_concurrency_and_speculation_crosses_over() -> None:
    def run(c: int, spec: SpecShape | None) -> float:
        return simulate_closed_loop(
            P,
            concurrency=c,
            requests=max(2 * c, 16),
            input_len=32,
            output_len=256,
            max_running=48 if spec else 2048,
            spec=spec,
        ).throughput

    base = [run(c, None) for c in (1, 2, 5, 10, 30)]
    spec = [run(c, EAGLE3) for c in (1, 2, 5, 10, 30)]
    assert base == sorted(base)
    assert spec[0] > base[0]  # wins single-stream
    assert spec[-1] < base[-1]  # loses under load


# -- scheduler behaviour -----------------------------------------------------------------------


def _sched(**kwargs: object) -> BatchScheduler:
    options: dict[str, object] = {"max_running": 2, "max_total_tokens": 10_000}
    options.update(kwargs)
    return BatchScheduler(P, **options)  # type: ignore[arg-type]


def test_admission_is_fifo_up_to_max_running() -> None:
    sched = _sched()
    seqs = [SeqState(10, 3, owner=i) for i in range(4)]
    for seq in seqs:
        sched.submit(seq)
    forward = sched.plan()
    assert forward is not None and forward.kind == "prefill"
    assert forward.seqs == seqs[:2] and forward.tokens == 20
    assert forward.cost_ms == pytest.approx(prefill_ms(P, 20))
    assert [s.owner for s in sched.waiting] == [2, 3]
    emissions = sched.complete(forward)
    assert [(e.seq.owner, e.gained) for e in emissions] == [(0, 1), (1, 1)]
    # Slots are full: decode steps until the first two finish, then the queue moves.
    forward = sched.plan()
    assert forward is not None and forward.kind == "decode" and len(forward.seqs) == 2
    assert forward.cost_ms == pytest.approx(decode_ms(P, 2))
    sched.complete(forward)
    forward = sched.plan()
    assert forward is not None
    emissions = sched.complete(forward)
    assert all(e.seq.state == DONE for e in emissions)
    assert sched.used_tokens == 0
    forward = sched.plan()
    assert forward is not None and forward.kind == "prefill"
    assert [s.owner for s in forward.seqs] == [2, 3]


def test_prefill_has_priority_over_decode() -> None:
    sched = _sched(max_running=4)
    first = SeqState(5, 10)
    sched.submit(first)
    plan = sched.plan()
    assert plan is not None
    sched.complete(plan)
    sched.submit(SeqState(5, 10))
    forward = sched.plan()
    assert forward is not None and forward.kind == "prefill"


def test_long_prompt_is_prefilled_in_chunks() -> None:
    sched = _sched(prefill_budget=100)
    seq = SeqState(250, 2)
    sched.submit(seq)
    chunks = []
    while True:
        forward = sched.plan()
        assert forward is not None
        if forward.kind != "prefill":
            break
        chunks.append(forward.tokens)
        sched.complete(forward)
    assert chunks == [100, 100, 50]
    assert seq.produced == 1 and seq.prefilled == 250


def test_kv_capacity_limits_admission_but_never_idles() -> None:
    sched = _sched(max_running=8, max_total_tokens=100)
    a, b = SeqState(80, 5), SeqState(80, 5)
    sched.submit(a)
    sched.submit(b)
    forward = sched.plan()
    assert forward is not None and forward.seqs == [a]  # b does not fit next to a
    sched.complete(forward)
    assert list(sched.waiting) == [b]


def test_cancel_frees_slot_and_tokens() -> None:
    sched = _sched()
    a, b, c = SeqState(10, 50), SeqState(10, 50), SeqState(10, 50)
    for seq in (a, b, c):
        sched.submit(seq)
    forward = sched.plan()
    assert forward is not None
    sched.complete(forward)
    assert sched.used_tokens == 22
    sched.cancel(a)
    sched.cancel(c)  # still waiting
    assert sched.used_tokens == 11 and not sched.waiting
    forward = sched.plan()
    assert forward is not None and forward.seqs == [b]


def test_verify_commits_between_one_and_draft_tokens_and_counts_verifies() -> None:
    sched = _sched(max_running=4, spec=EAGLE3, rng=random.Random(3))
    seqs = [SeqState(8, 200) for _ in range(4)]
    for seq in seqs:
        sched.submit(seq)
    while sched.busy:
        forward = sched.plan()
        assert forward is not None
        if forward.kind == "verify":
            assert forward.tokens == 4 * len(forward.seqs)
            assert forward.cost_ms == pytest.approx(cycle_ms(P, len(forward.seqs), EAGLE3))
        for emission in sched.complete(forward):
            if forward.kind == "verify":
                assert 1 <= emission.gained <= 4
                assert emission.accepted == emission.gained - 1
    for seq in seqs:
        assert seq.produced == 200
        # The prefill gave the first token; every other came from a verify.
        assert 1.6 < (seq.produced - 1) / seq.verify_ct < 2.4


# -- noise -------------------------------------------------------------------------------------


def test_no_noise_is_exactly_one() -> None:
    noise = SpeedNoise(0.0)
    assert {noise.factor(t / 10) for t in range(1000)} == {1.0}


def test_noise_is_seeded_positive_and_centred() -> None:
    a, b = SpeedNoise(0.05, seed=1), SpeedNoise(0.05, seed=1)
    factors = [a.factor(t * 0.5) for t in range(4000)]
    assert factors == [b.factor(t * 0.5) for t in range(4000)]
    assert factors != [SpeedNoise(0.05, seed=2).factor(t * 0.5) for t in range(4000)]
    assert min(factors) > 0
    assert statistics.fmean(factors) == pytest.approx(1.0, abs=0.08)
    # Constant within an interval, changing across them.
    assert a.factor(10.1) == a.factor(10.4)


@pytest.mark.parametrize("window", [8, 80])
def test_consecutive_runs_differ_by_about_the_cv(window: int) -> None:
    # Runs of `window` noise intervals (4 s and 40 s of model time): the spread of a run's
    # mean speed relative to the next run's (Allan deviation) is about the CV, whatever the
    # run length. Averaged over seeds; bounds generous (it is a random process).
    cv = 0.05
    variances = []
    for seed in range(6):
        noise = SpeedNoise(cv, seed=seed)
        means = [
            statistics.fmean(noise.factor((k * window + i) * 0.5) for i in range(window))
            for k in range(120)
        ]
        variances.append(
            statistics.fmean((means[i + 1] - means[i]) ** 2 for i in range(len(means) - 1)) / 2
        )
    allan = math.sqrt(statistics.fmean(variances))
    assert 0.6 * cv < allan < 1.5 * cv


def test_noise_rejects_bad_values() -> None:
    with pytest.raises(ValueError):
        SpeedNoise(-0.1)
    with pytest.raises(ValueError):
        SpeedNoise(0.1, interval=0)
