"""The example story (``examples/``) as the end-to-end tests run it: three runs a side."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: Emulator flags for a launch that is ready at once (the example's emulator loads for
#: seconds, as a server would): the tests here are about measurements and verdicts.
FAST_START = "--emulator-load-time 0 --emulator-warmup-time 0 --emulator-health-probe-time 0"


def write_story(pytester: pytest.Pytester, *, autosave: bool = True) -> None:
    """Write the example story and its ``pyproject.toml`` into ``pytester``'s directory.

    With emulators that start at once (``FAST_START``) and three runs a side instead of the
    example's seven: the verdicts at C=1, where one side is faster in every run, decide as
    with seven, in less than half the time. These tests check what the plugin does with a
    verdict; the example's own statistics are checked by ``pytest examples
    --sglang-launcher=emulator`` (``.ci/run``).
    """
    story = (EXAMPLES / "test_story.py").read_text()
    shortened = story.replace("\nREPEATS = 7\n", "\nREPEATS = 3\n")
    assert shortened != story, "examples/test_story.py no longer says REPEATS = 7"
    ini = (EXAMPLES / "pyproject.toml").read_text()
    speedup = 'sglang_emulator_args = "--emulator-speedup 20"'
    assert speedup in ini, f"examples/pyproject.toml no longer says {speedup}"
    ini = ini.replace(speedup, f'{speedup[:-1]} {FAST_START}"')
    if not autosave:
        ini = ini.replace('autosave = "true"', 'autosave = "false"')
    pytester.makepyfile(test_story=shortened)
    (pytester.path / "pyproject.toml").write_text(ini)
