"""The README's first suite runs as printed, on the emulator."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def blocks(language: str) -> list[str]:
    """Return the README's fenced code blocks in ``language``, in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", README.read_text(), re.MULTILINE | re.DOTALL)


def test_the_readme_is_short() -> None:
    # Depth goes to docs/guide.md; the README is what a newcomer reads first.
    assert len(README.read_text().encode()) <= 12 * 1024


@pytest.mark.slow
def test_the_first_suite_runs_as_printed(pytester: pytest.Pytester) -> None:
    (profiles,) = blocks("toml")
    suite, *_ = blocks("python")
    (pytester.path / "pyproject.toml").write_text(profiles)
    pytester.makepyfile(test_first_suite=suite)
    commands = [line for line in blocks("bash")[1].splitlines() if "--sglang-launcher" in line]
    assert commands[0].split("#")[0].split() == ["pytest", "--sglang-launcher=emulator"]
    result = pytester.runpytest_subprocess(*commands[0].split("#")[0].split()[1:])
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*emulated at 20x*", "[[]PASS[]] *test_baseline_beats_eagle3*"])
