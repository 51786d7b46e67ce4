"""Server profiles: parsing, extends, and every error naming file, profile and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_sglang.config.profiles import load_profiles, merge_args
from pytest_sglang.config.redaction import Redactor
from pytest_sglang.server.launcher import build_command, server_environment

GOOD = """
[profiles.baseline]
model-path = "moonshotai/Kimi-K2.5"
tp = 8
args = ["--mem-fraction-static", "0.85", "--max-running-requests", 256]
env = { NCCL_P2P_DISABLE = "1", NCCL_IB_DISABLE = "1" }
expect = { max_model_len = 262144, tp_size = 8 }

[profiles.eagle3]
extends = "baseline"
args = ["--speculative-algorithm", "EAGLE3", "--max-running-requests=48"]
env = { NCCL_P2P_DISABLE = "0" }
expect = { speculative_algorithm = "EAGLE3" }
command = ["sglang", "serve"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "profiles.toml"
    path.write_text(text)
    return path


def test_extends_merges_args_env_and_expect(tmp_path: Path) -> None:
    profiles = load_profiles(None, write(tmp_path, GOOD))
    base, spec = profiles["baseline"], profiles["eagle3"]
    assert base.args == ("--mem-fraction-static", "0.85", "--max-running-requests", "256")
    assert spec.model_path == "moonshotai/Kimi-K2.5" and spec.tp == 8
    # The extending profile's value of a flag wins, in the base's position; new flags follow.
    assert spec.args == (
        "--mem-fraction-static", "0.85", "--max-running-requests", "48",
        "--speculative-algorithm", "EAGLE3",
    )  # fmt: skip
    assert spec.env == {"NCCL_P2P_DISABLE": "0", "NCCL_IB_DISABLE": "1"}
    assert spec.expect == {"max_model_len": 262144, "tp_size": 8, "speculative_algorithm": "EAGLE3"}
    assert spec.command == ("sglang", "serve") and base.command is None
    assert [e.key for e in spec.expectations()] == [
        "max_model_len",
        "tp_size",
        "speculative_algorithm",
    ]
    assert "profile 'eagle3' in" in spec.expectations()[0].source


def test_pyproject_tables(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.pytest-sglang.profiles.small]\nmodel-path = "m"\n')
    assert load_profiles(pyproject, None)["small"].tp == 1


def test_a_whole_float_tp_launches_with_an_integer_tensor_parallel_size(tmp_path: Path) -> None:
    # TOML's 8.0 is a float; the schema's "integer" accepts it (JSON Schema counts a whole
    # float as an integer). The profile must still hold the int 8: --tp-size 8, not 8.0, and
    # the count of GPUs a launch takes (a float there is an internal error).
    profiles = load_profiles(None, write(tmp_path, '[profiles.a]\nmodel-path = "m"\ntp = 8.0\n'))
    tp = profiles["a"].tp
    assert tp == 8 and type(tp) is int
    command = build_command(profiles["a"], "sglang", "127.0.0.1", 30000)
    assert command[command.index("--tp-size") + 1] == "8"


def test_name_in_both_files_is_an_error(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.pytest-sglang.profiles.baseline]\nmodel-path = "m"\n')
    with pytest.raises(pytest.UsageError, match="also defined in"):
        load_profiles(pyproject, write(tmp_path, GOOD))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[profiles.a]\nmodel-path = "m"\nmodle = 1\n',
         "[profiles.a] modle: unknown key; valid keys are model-path, tp, args"),
        ("[profiles.a]\ntp = 2\n", "[profiles.a] model-path: missing"),
        ('[profiles.a]\nmodel-path = "m"\ntp = "8"\n', "tp: expected a tensor-parallel size"),
        ('[profiles.a]\nmodel-path = "m"\nargs = "--x"\n', "args: expected a list"),
        ('[profiles.a]\nmodel-path = "m"\nargs = ["x"]\n', "args[0]: expected a --flag first"),
        ('[profiles.a]\nmodel-path = "m"\nargs = ["--port", "1"]\n',
         "args[0]: expected a flag the launcher does not set itself"),
        ('[profiles.a]\nmodel-path = "m"\nargs = [true]\n', "args[0]: expected a --flag first"),
        ('[profiles.a]\nmodel-path = "m"\nenv = 3\n', "env: expected a table"),
        ('[profiles.a]\nmodel-path = "m"\nenv = { X = true }\n', "env.X: expected a string"),
        ('[profiles.a]\nmodel-path = "m"\ncommand = []\n', "command: expected a non-empty"),
        ('[profiles.a]\nmodel-path = "m"\nextends = "b"\n', "no profile named 'b'"),
        ('[profiles.a]\nmodel-path = "m"\nextends = "b"\n[profiles.b]\nextends = "a"\n',
         "cycle"),
        ('[profiles.a]\nmodel-path = "m"\nextends = "a"\n', "cycle a -> a"),
        ('[profiles."a b"]\nmodel-path = "m"\n', "expected a profile name of letters"),
        ("[profiles.a\n", "not valid TOML"),
    ],
)  # fmt: skip
def test_errors_name_file_profile_and_key(tmp_path: Path, text: str, expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(pytest.UsageError) as info:
        load_profiles(None, path)
    assert str(path) in str(info.value)
    assert expected in str(info.value)


def test_a_file_that_cannot_be_read_is_a_usage_error(tmp_path: Path) -> None:
    # A directory, or (for a user who is not root) a file without read permission.
    with pytest.raises(pytest.UsageError, match=rf"{re.escape(str(tmp_path))}: cannot be read \("):
        load_profiles(None, tmp_path)


def test_option_errors_reach_the_user(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profiles='[profiles.a]\nmodel-path = "m"\ntp = 0\n')
    result = pytester.runpytest("--sglang-profiles=profiles.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "[profiles.a] tp: expected a tensor-parallel size" in result.stderr.str()
    result = pytester.runpytest("--sglang-profiles=missing.toml")
    assert (
        f"--sglang-profiles: 'missing.toml' (relative to {pytester.path}) is not a file "
        "(from --sglang-profiles on the command line)" in result.stderr.str()
    )
    result = pytester.runpytest("--sglang-launcher=docker")
    assert "--sglang-launcher: 'docker' is not a launcher" in result.stderr.str()


def test_profiles_show_in_header(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest-sglang.profiles.small]\nmodel-path = "m"\n')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--sglang-launcher=emulator")
    result.stdout.fnmatch_lines(
        ["sglang: launcher: emulator (from --sglang-launcher on the command line); profiles: small"]
    )


def test_merge_args_normalises_flag_spelling() -> None:
    assert merge_args(["--max_running_requests", "8"], ["--max-running-requests", "16"]) == [
        "--max-running-requests", "16",
    ]  # fmt: skip


def test_command_lines_are_the_same_for_both_launchers(tmp_path: Path) -> None:
    spec = load_profiles(None, write(tmp_path, GOOD))["eagle3"]
    base = load_profiles(None, write(tmp_path, GOOD))["baseline"]
    real = build_command(spec, "sglang", "127.0.0.1", 31000, python="py")
    emulated = build_command(spec, "emulator", "127.0.0.1", 31000, python="py")
    assert real[:2] == ["sglang", "serve"]
    assert emulated[:3] == ["py", "-m", "pytest_sglang.emulator"]
    assert real[2:] == emulated[3:]
    assert real[2:10] == ["--model-path", "moonshotai/Kimi-K2.5", "--tp-size", "8",
                          "--host", "127.0.0.1", "--port", "31000"]  # fmt: skip
    assert build_command(base, "sglang", "h", 1, python="py")[:3] == [
        "py", "-m", "sglang.launch_server",
    ]  # fmt: skip


def test_redact_hides_api_keys() -> None:
    argv = ["x", "--api-key", "sk-1", "--admin-api-key=sk-2", "--port", "1"]
    assert Redactor().argv(argv) == ["x", "--api-key", "***", "--admin-api-key=***", "--port", "1"]


def test_server_environment_drops_the_test_runs_variables() -> None:
    ours = {
        "PATH": "/usr/bin",
        "HF_HOME": "/models",
        "PYTEST_CURRENT_TEST": "tests/test_x.py::test_y (call)",
        "PYTEST_SGLANG_URL": "http://h:1",
        "PYTEST_XDIST_WORKER": "gw0",
        "COV_CORE_SOURCE": "src",
        "COVERAGE_PROCESS_START": ".coveragerc",
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "0",
    }
    profile = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "PYTEST_KEEP": "on purpose"}
    assert server_environment(ours, profile) == {
        "PATH": "/usr/bin",
        "HF_HOME": "/models",
        "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1",
        "PYTEST_KEEP": "on purpose",
    }
