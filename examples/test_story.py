"""The story, as tests: does EAGLE-3 pay off, and where does it stop paying off?

Baseline and EAGLE-3 profiles (``pyproject.toml`` here) are measured at the concurrency
levels of the story, one server at a time, each launched once: every test declares what it
measures (``@pytest.mark.sglang_measure``), so each server takes all of it while it is up,
and the tests read the results in any order (``-k``, ``-p randomly``). The results table at
the end of the run shows every level; the verdicts decide with statistics over repeated runs
and say so when they cannot.

Against the emulator: ``pytest examples --sglang-launcher=emulator`` (the ini file passes
``--emulator-speedup`` so the sweep takes minutes, with the same shape). On GPUs: ``pytest
examples`` launches the real servers, or attach running ones with ``--sglang-url
baseline=URL --sglang-url eagle3=URL``.

How big the story is told depends on the hardware: ``STORY_SCALE`` picks a row of
``STORIES`` (``gpu`` unless set). ``STORY_SCALE=cpu`` is the story on two CPU cores, a real
SGLang serving a small planted target and its EAGLE-3 draft (``real_sglang/README.md``;
the real-SGLang tier runs this file so).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from pytest_sglang import (
    Bench,
    Workload,
    assert_faster,
    estimate_break_even,
    find_crossover,
)


@dataclass(frozen=True)
class Story:
    """The story's size: what each run sends, at which levels, how many runs per side."""

    workload: Workload
    levels: list[int]
    repeats: int
    #: The concurrency by which speculation must have stopped paying off.
    stops_by: int


STORIES = {
    # Llama-3.1-8B with an EAGLE-3 draft on one GPU (or the emulator's model of it). Short
    # prompts so that decode dominates, exact output lengths (ignore_eos); every level gets
    # at least one request per slot, so C=250 really holds 250 requests in flight, and at
    # least 24 requests, so that a run at low concurrency averages over enough of them (the
    # accepted lengths vary per request) for a 4 % difference to stand out of the noise.
    # Seven runs per side: the exact test still decides at alpha 0.05 with one run out of
    # line (with five, a single disturbed run leaves p at 0.075).
    "gpu": Story(
        Workload(input_len=32, output_len=256, requests=24, requests_per_slot=1),
        levels=[1, 2, 5, 10, 30, 70, 100, 250],
        repeats=7,
        stops_by=10,
    ),
    # Two CPU cores: a step costs ~80 ms at C=1, so a run is a few short requests. EAGLE-3
    # wins ~1.5x at C=1 and loses from C=8 on, where its 4-token verify is compute-bound.
    "cpu": Story(
        Workload(input_len=16, output_len=32, requests=4, requests_per_slot=1),
        levels=[1, 8],
        repeats=5,
        stops_by=8,
    ),
}
SCALE = os.environ.get("STORY_SCALE", "gpu")
if SCALE not in STORIES:
    raise pytest.UsageError(f"STORY_SCALE={SCALE!r}: no such story; use one of {list(STORIES)}")
STORY = STORIES[SCALE]
CHAT, LEVELS, REPEATS = STORY.workload, STORY.levels, STORY.repeats


def measures(*levels: int) -> pytest.MarkDecorator:
    """Declare that a test measures both servers under CHAT at these levels."""
    return pytest.mark.sglang_measure(
        "baseline", "eagle3", workload=CHAT, concurrency=list(levels), repeats=REPEATS
    )


@measures(*LEVELS)
def test_speculation_stops_paying_off(sglang_bench: Bench) -> None:
    base = sglang_bench("baseline", CHAT, concurrency=LEVELS, repeats=REPEATS)
    spec = sglang_bench("eagle3", CHAT, concurrency=LEVELS, repeats=REPEATS)
    crossover = find_crossover(spec, base)
    print(crossover.table())
    # The story's question: speculation has stopped paying off by concurrency 10 (on a GPU).
    assert crossover <= STORY.stops_by


@measures(1)
def test_eagle3_beats_baseline_single_stream(sglang_bench: Bench) -> None:
    base = sglang_bench("baseline", CHAT, concurrency=1, repeats=REPEATS)
    spec = sglang_bench("eagle3", CHAT, concurrency=1, repeats=REPEATS)
    assert_faster(spec, base)


@measures(LEVELS[-1])
def test_baseline_beats_eagle3_under_load(sglang_bench: Bench) -> None:
    base = sglang_bench("baseline", CHAT, concurrency=LEVELS[-1], repeats=REPEATS)
    spec = sglang_bench("eagle3", CHAT, concurrency=LEVELS[-1], repeats=REPEATS)
    # At C=250 the verdict warns that EAGLE runs at most 48 requests at once: part of its loss.
    assert_faster(base, spec)


@measures(1)
def test_acceptance_beats_break_even_at_c1(sglang_bench: Bench) -> None:
    base = sglang_bench("baseline", CHAT, concurrency=1, repeats=REPEATS)
    spec = sglang_bench("eagle3", CHAT, concurrency=1, repeats=REPEATS)
    estimate = estimate_break_even(spec, base)
    print(
        f"cycle {estimate.t_cycle * 1000:.1f} ms vs decode step {estimate.t_decode * 1000:.1f} ms:"
        f" break-even acceptance length {estimate.break_even:.2f}, measured "
        f"{estimate.accept_length:.2f}, speed-up {estimate.speedup:.2f}x"
    )
    assert estimate.accept_length > estimate.break_even
