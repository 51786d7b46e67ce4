"""The option surface: at most 15 flags, a short `pytest --help`, per-project ini keys."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_sglang.config.options import OPTIONS, OptionSpec

#: Issue 25's caps: the flags a person changes from run to run, and the lines they add.
MAX_FLAGS = 15
MAX_HELP_LINES = 120
#: A help text fits on one line of `pytest --help` at 80 columns (it starts at column 24).
HELP_WIDTH = 80 - 24


def _help(tmp_path: Path, *args: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["COLUMNS"] = "80"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *args, "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_at_most_15_command_line_options() -> None:
    flags = [spec.cli for spec in OPTIONS if spec.cli]
    assert len(flags) <= MAX_FLAGS, flags


def test_the_plugin_adds_at_most_120_lines_to_help(tmp_path: Path) -> None:
    with_plugin = _help(tmp_path, "-p", "sglang")
    without = _help(tmp_path, "-p", "no:sglang")
    flags = {line.split()[0].split("=")[0] for line in with_plugin if "  --sglang-" in line}
    assert flags == {spec.cli for spec in OPTIONS if spec.cli}
    assert len(with_plugin) - len(without) <= MAX_HELP_LINES


@pytest.mark.parametrize("spec", OPTIONS, ids=[spec.ini for spec in OPTIONS])
def test_every_help_text_is_one_line(spec: OptionSpec) -> None:
    assert len(spec.help) <= HELP_WIDTH and "\n" not in spec.help, spec.help


def test_a_per_project_setting_is_an_ini_key_without_a_flag(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--sglang-stall-timeout=1s")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unrecognized arguments: --sglang-stall-timeout=1s" in result.stderr.str()
    pytester.makepyfile("def test_x(sglang_settings):\n    print(sglang_settings.stall_timeout)")
    result = pytester.runpytest("-s", "-o", "sglang_stall_timeout=1s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*value=1.0, source='-o sglang_stall_timeout on the command line'*"]
    )


def test_o_on_the_command_line_beats_the_environment(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_SGLANG_READY_TIMEOUT", "45")
    pytester.makepyfile("def test_x(sglang_settings):\n    print(sglang_settings.ready_timeout)")
    result = pytester.runpytest("-s", "-o", "sglang_ready_timeout=2m")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*value=120.0, source='-o sglang_ready_timeout on the command*"])
    # A relative path given with -o is relative to where pytest runs, as for a flag.
    result = pytester.runpytest("-o", "sglang_gpu_fake=missing")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*sglang_gpu_fake: 'missing' (relative to *) is not a directory*"])
