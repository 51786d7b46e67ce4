"""The example story's C=1 verdict reacts to the emulator like it would to real servers."""

from __future__ import annotations

import pytest

from tests.e2e.story import FAST_START, write_story


@pytest.fixture
def story(pytester: pytest.Pytester) -> pytest.Pytester:
    write_story(pytester)
    return pytester


@pytest.mark.parametrize(
    ("emulator_args", "outcome"),
    [
        # Acceptance length 1.2: speculation costs more than it saves; the verdict fails.
        ("--emulator-speedup 100 --emulator-accept-length 1.2", "PerformanceAssertionError"),
        # Run-to-run noise far above the difference making the runs inconclusive is checked
        # on synthetic runs in test_verdicts.py: end to end, both emulators draw the same
        # seeded noise path, which cancels between the blocks and makes the outcome a
        # matter of run timing.
    ],
)
def test_single_stream_verdict(story: pytest.Pytester, emulator_args: str, outcome: str) -> None:
    result = story.runpytest_subprocess(
        "-k",
        "single_stream",
        "--sglang-launcher=emulator",
        f"--sglang-emulator-args={emulator_args} {FAST_START}",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"E * pytest_sglang.errors.{outcome}: assert_faster(eagle3 @ C=1, baseline @ C=1): *",
        "E * run * eagle3 * baseline",
        "E * median *",
    ])  # fmt: skip
