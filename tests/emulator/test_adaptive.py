"""Adaptive speculation in the emulator: flags resolved, config checked, steps per batch size.

The rules are SGLang 0.5.23's (``srt/speculative/adaptive_spec_params.py``,
``srt/arg_groups/speculative_hook.py``); the expected values below are worked out by hand from
them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_sglang.emulator.config.cli import parse_args
from pytest_sglang.emulator.config.server_args import ServerArgsError
from pytest_sglang.emulator.engine.adaptive import AdaptiveSteps, StepSlot, load_config
from pytest_sglang.emulator.engine.batch_scheduler import simulate_closed_loop
from pytest_sglang.emulator.engine.perf_model import DEFAULT_PARAMS, SpecShape

MODEL = ("--model-path", "emulated/Llama-3.1-8B-Instruct")
EAGLE3 = (*MODEL, "--speculative-algorithm", "EAGLE3", "--speculative-adaptive")


def test_adaptive_eagle3_resolves_the_middle_candidate_and_top_k_1() -> None:
    args = parse_args(EAGLE3).server_args
    assert args["speculative_adaptive"] is True
    assert args["speculative_adaptive_config"] is None
    # Union of the default candidates [0, 1, 3, 5, 7]: the middle one.
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"]) == (3, 1)
    assert args["speculative_num_draft_tokens"] == 4


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (("--speculative-algorithm", "NGRAM"), "speculative_algorithm=NGRAM (only EAGLE/EAGLE3"),
        ((), "speculative_algorithm=None (only EAGLE/EAGLE3"),
        (
            ("--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3",
             "--speculative-eagle-topk", "2", "--speculative-num-draft-tokens", "6"),
            "speculative_eagle_topk=2 (only topk=1 is supported)",
        ),
        (
            ("--speculative-algorithm", "EAGLE", "--dp-size", "2", "--enable-dp-attention"),
            "attention DP is not supported",
        ),
    ],
)  # fmt: skip
def test_unsupported_combinations_fall_back_to_static_with_sglangs_warning(
    flags: tuple[str, ...], reason: str
) -> None:
    config = parse_args((*MODEL, "--speculative-adaptive", *flags))
    assert config.server_args["speculative_adaptive"] is False
    (warning,) = [w for w in config.warnings if "speculative_adaptive" in w]
    assert warning.startswith(f"speculative_adaptive disabled: {reason}")
    assert warning.endswith("Falling back to static speculative params.")
    if "topk=2" in reason:
        args = config.server_args
        assert (args["speculative_num_steps"], args["speculative_num_draft_tokens"]) == (3, 6)


def test_old_surface_has_no_adaptive_key() -> None:
    args = parse_args((*MODEL, "--emulator-version", "0.5.5")).server_args
    assert "speculative_adaptive" not in args


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", "json.decoder.JSONDecodeError: Expecting property name"),
        ('{"1": {"candidate_steps": []}}', "ValueError: BS 1: candidate_steps must be a list"),
        ('{"8": {"candidate_steps": [1, -1]}}', "got [1, -1]"),
        ('{"1": [1, 3]}', "AttributeError: 'list' object has no attribute 'get'"),
        ('{"ema_alpha": 0.3}', "at least one integer-string BS key"),
    ],
)
def test_bad_config_is_rejected_as_sglang_rejects_it(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text(content)
    with pytest.raises(ServerArgsError) as info:
        parse_args((*EAGLE3, "--speculative-adaptive-config", str(path)))
    assert message in str(info.value)


def test_missing_config_file_and_steps_outside_the_candidates_are_rejected(
    tmp_path: Path,
) -> None:
    with pytest.raises(ServerArgsError, match=r"FileNotFoundError: \[Errno 2\]"):
        parse_args((*EAGLE3, "--speculative-adaptive-config", str(tmp_path / "none.json")))
    with pytest.raises(ServerArgsError, match=r"--speculative-num-steps=2 is not in the adaptive "
                       r"config candidate_steps \[0, 1, 3, 5, 7\]"):  # fmt: skip
        parse_args((*EAGLE3, "--speculative-num-steps", "2"))


def test_config_file_sets_buckets_and_top_level_knobs(tmp_path: Path) -> None:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps({"ema_alpha": 0.5, "1": {"candidate_steps": [2, 4]}, "16": {
        "candidate_steps": [0], "ema_alpha": 0.1}}))  # fmt: skip
    args = parse_args((*EAGLE3, "--speculative-adaptive-config", str(path))).server_args
    assert (args["speculative_num_steps"], args["speculative_adaptive_config"]) == (2, str(path))
    buckets = load_config(str(path))
    assert sorted(buckets) == [1, 16]
    assert (buckets[1]["ema_alpha"], buckets[16]["ema_alpha"]) == (0.5, 0.1)


def test_batches_route_to_buckets_after_cuda_graph_padding() -> None:
    adaptive = AdaptiveSteps(3, load_config(None), graph_sizes=[1, 2, 4, 8, 12, 16, 24, 32, 40])
    # Bucket "1" starts at 3, "8" at 3, "32" at the middle of [0, 1], "64" at 0.
    routed = {bs: adaptive.steps_for(bs) for bs in (1, 4, 5, 8, 24, 25, 40, 63, 64)}
    assert routed == {1: 3, 4: 3, 5: 3, 8: 3, 24: 3, 25: 1, 40: 1, 63: 1, 64: 0}
    assert adaptive.slot(5) is adaptive.slot(8)  # 5 pads to the graph size 8
    plain = AdaptiveSteps(3, load_config(None))
    assert plain.slot(5) is plain.slot(1)  # without CUDA graphs 5 stays 5: bucket "1"


def test_ema_moves_steps_down_and_probes_up_after_warm_up() -> None:
    slot = StepSlot(1, {"candidate_steps": [0, 1], "down_hysteresis": 0.0})
    assert (slot.steps, slot.ema) == (1, 0.0)
    # Ten warm-up verifies, then a decision every 5: EMA 0.5 * (1 - 0.8**15) <= 0.5 drops to 0.
    changes = [slot.update([0, 1]) for _ in range(15)]
    assert changes == [False] * 14 + [True] and slot.steps == 0
    ema = slot.ema
    # At 0 the EMA is frozen; five verifies later the next candidate is probed.
    assert [slot.update([0]) for _ in range(5)] == [False] * 4 + [True]
    assert (slot.steps, slot.ema) == (1, ema)


def test_bucket_changes_are_reported() -> None:
    changes: list[tuple[int, int, float]] = []
    adaptive = AdaptiveSteps(3, load_config(None), on_change=lambda *c: changes.append(c))
    for _ in range(15):
        adaptive.observe([0, 0], 40)  # bucket "32" starts at 1; no accepted drafts: down to 0
    assert [(old, new) for old, new, _ in changes] == [(1, 0)]
    assert changes[0][2] == 0.0


def test_high_acceptance_climbs_the_candidates() -> None:
    slot = StepSlot(3, {"candidate_steps": [1, 3, 5, 7]})
    for _ in range(15):
        slot.update([3, 3])
    # EMA 3 - 0.8**15 = 2.96 > 3 - 0.5, but not > 5 - 0.5: from 3 up to 5, not further.
    assert slot.steps == 5
    for _ in range(30):
        slot.update([6, 6])
    assert slot.steps == 7  # EMA above 6.5: the top candidate


def test_adaptive_server_is_speculative_at_c1_and_baseline_at_high_concurrency() -> None:
    spec = SpecShape(num_steps=3, topk=1, num_draft_tokens=4, accept_length=3.0)
    common = {"input_len": 32, "output_len": 128, "max_running": 64}

    def run(
        concurrency: int, shape: SpecShape | None, adaptive: bool = False, extend: bool = True
    ) -> float:
        steps = AdaptiveSteps(3, load_config(None), zero_step_extend=extend) if adaptive else None
        result = simulate_closed_loop(
            DEFAULT_PARAMS, concurrency=concurrency, requests=2 * concurrency + 8, spec=shape,
            adaptive=steps, **common,
        )  # fmt: skip
        return result.throughput

    # Bucket "1" stays at 3 steps while the EMA (~2 accepted drafts) is <= 2.5; a lucky
    # stretch may try 5 for a while, which costs about as much as it gains here.
    assert run(1, spec, adaptive=True) == pytest.approx(run(1, spec), rel=0.05)
    assert run(1, spec) > 1.3 * run(1, None)
    # 64 at once: bucket "64" never drafts: the baseline's decode step plus, by default, the
    # draft model's extend over the batch (9.52 + 1.254 * 64 ms, plus 1.98 + 0.071 * 64 ms).
    assert run(64, spec, adaptive=True, extend=False) == pytest.approx(run(64, None), rel=0.01)
    slower = (9.52 + 1.254 * 64) / (9.52 + 1.254 * 64 + 1.98 + 0.071 * 64)
    assert run(64, spec, adaptive=True) == pytest.approx(slower * run(64, None), rel=0.01)
    assert run(64, spec) < 0.85 * run(64, None)
