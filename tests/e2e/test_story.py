"""The example story's C=1 verdict reacts to the emulator like it would to real servers."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: The example's emulators load for seconds, as servers would: these start at once.
FAST_START = "--emulator-load-time 0 --emulator-warmup-time 0 --emulator-health-probe-time 0"


@pytest.fixture
def story(pytester: pytest.Pytester) -> pytest.Pytester:
    """The example story with three runs a side instead of seven, which decide as well here.

    The verdict under test is one side faster in every run; the example's own statistics
    are checked by ``pytest examples --sglang-launcher=emulator`` (``.ci/run``).
    """
    story = (EXAMPLES / "test_story.py").read_text()
    shortened = story.replace("        repeats=7,\n", "        repeats=3,\n", 1)
    assert shortened != story, "examples/test_story.py's gpu story no longer says repeats=7"
    pytester.makepyfile(test_story=shortened)
    (pytester.path / "pyproject.toml").write_text((EXAMPLES / "pyproject.toml").read_text())
    return pytester


@pytest.mark.parametrize(
    ("emulator_args", "outcome"),
    [
        # Acceptance length 1.2: speculation costs more than it saves; the verdict fails.
        # At the example's speed-up (20x): faster, a request's server time shrinks toward the
        # client's own per-request cost, and a loaded machine can no longer hold C=1.
        ("--emulator-speedup 20 --emulator-accept-length 1.2", "PerformanceAssertionError"),
        # Run-to-run noise far above the difference making the runs inconclusive is checked
        # on synthetic runs in test_verdicts.py: end to end, both emulators draw the same
        # seeded noise path, which cancels between the blocks and makes the outcome a
        # matter of run timing.
    ],
)
@pytest.mark.slow
def test_single_stream_verdict(story: pytest.Pytester, emulator_args: str, outcome: str) -> None:
    result = story.runpytest_subprocess(
        "-k",
        "single_stream",
        "--sglang-launcher=emulator",
        f"-osglang_emulator_args={emulator_args} {FAST_START}",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"E * pytest_sglang.errors.{outcome}: assert_faster(eagle3 @ C=1, baseline @ C=1): *",
        "E * run * eagle3 * baseline",
        "E * median *",
    ])  # fmt: skip
