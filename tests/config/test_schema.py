"""Profiles validated by ``schemas/config.schema.json``: each violation and its message.

A message names the file, the TOML table, the key, what is allowed and how to write it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from pytest_sglang.config.profiles import load_profiles
from pytest_sglang.config.schema import read_schema


def error_of(tmp_path: Path, body: str, name: str = "eagle3") -> str:
    path = tmp_path / "profiles.toml"
    path.write_text(f"[profiles.{name}]\n{body}")
    with pytest.raises(pytest.UsageError) as info:
        load_profiles(None, path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    return message.removeprefix(f"{path}: ")


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(read_schema("config"))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('model-path = "m"\ntp = "two"\n',
         '[profiles.eagle3] tp: expected a tensor-parallel size 1..64, got "two"; '
         "write e.g. tp = 8"),
        ('model-path = "m"\ntp = 0\n', "[profiles.eagle3] tp: expected a tensor-parallel size"),
        ('model-path = "m"\ntp = true\n', "tp: expected a tensor-parallel size 1..64, got true"),
        ('model-path = ""\n', '[profiles.eagle3] model-path: expected a non-empty string, got ""'),
        ('model-path = "m"\nmodle-path = "m"\n',
         "[profiles.eagle3] modle-path: unknown key; did you mean model-path? valid keys are "
         "model-path, tp, args, env, expect, extends, command, kind"),
        ('model-path = "m"\nargs = "--tp 2"\n',
         "[profiles.eagle3] args: expected a list of server flags and their values, each a "
         'string, got "--tp 2"; write e.g. args = ["--mem-fraction-static", "0.85"]'),
        ('model-path = "m"\nargs = ["x"]\n',
         '[profiles.eagle3] args[0]: expected a --flag first, its values after it, got "x"'),
        ('model-path = "m"\nargs = ["--a", true]\n',
         "[profiles.eagle3] args[1]: expected a list of server flags and their values, each a "
         "string, got true"),
        ('model-path = "m"\nargs = ["--log-level", "info", "--port=1"]\n',
         "[profiles.eagle3] args[2]: expected a flag the launcher does not set itself "
         '(model-path and tp are profile keys; the plugin chooses host and port), got "--port=1"'),
        ('model-path = "m"\nargs = ["--port", "30000"]\n',
         '[profiles.eagle3] args[0]: expected a flag the launcher does not set itself'),
        ('model-path = "m"\nenv = 3\n', "[profiles.eagle3] env: expected a table of environment"),
        ('model-path = "m"\nenv = { X = true }\n',
         "[profiles.eagle3] env.X: expected a string without NUL characters (which no "
         "environment can hold), got true"),
        ('model-path = "m"\nenv = { "A=B" = "1" }\n',
         '[profiles.eagle3] env: expected an environment variable name (not empty, no \'=\' or '
         'NUL, which no environment can hold), got name "A=B"'),
        ('model-path = "m"\nexpect = { "tp size" = 8 }\n',
         '[profiles.eagle3] expect: expected model_id, max_model_len or a /server_info key'),
        ('model-path = "m"\nkind = "vllm"\n',
         '[profiles.eagle3] kind: expected a server kind: "sglang", or "openai" for a plain '
         'OpenAI-compatible server (vLLM, llama.cpp, TGI...) attached by URL, got "vllm"; '
         'write e.g. kind = "openai"'),
        ('model-path = "m"\ncommand = []\n',
         "[profiles.eagle3] command: expected a non-empty list of non-empty strings, got []"),
        ('model-path = "m"\nextends = 1\n',
         "[profiles.eagle3] extends: expected the name of another profile, got 1"),
    ],
)  # fmt: skip
def test_each_violation_has_its_message(tmp_path: Path, body: str, expected: str) -> None:
    assert expected in error_of(tmp_path, body)


def test_a_name_that_is_no_bare_key_is_quoted(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'model-path = "m"\ntp = 0\n', name='"v1.2"')
    assert message.startswith('[profiles."v1.2"] tp: ')
    assert "[profiles]: expected a profile name of letters, digits" in error_of(
        tmp_path, 'model-path = "m"\n', name='"a b"'
    )


def test_pyproject_messages_name_its_table(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.pytest-sglang.profiles.small]\nmodel-path = "m"\ntp = 99\n')
    with pytest.raises(pytest.UsageError, match=r"\[tool\.pytest-sglang\.profiles\.small\] tp: "):
        load_profiles(pyproject, None)
    pyproject.write_text("[tool.pytest-sglang]\nprofiles = 3\n")
    with pytest.raises(pytest.UsageError, match=r"\[tool\.pytest-sglang\.profiles\]: expected a"):
        load_profiles(pyproject, None)


def test_every_violation_is_listed(tmp_path: Path) -> None:
    message = error_of(tmp_path, 'model-path = "m"\ntp = 0\nkind = "x"\n')
    first, second = message.splitlines()
    assert first.startswith("[profiles.eagle3] kind: expected a server kind")
    assert second.startswith(f"{tmp_path / 'profiles.toml'}: [profiles.eagle3] tp: expected")


def test_secrets_never_reach_a_message(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        'model-path = "m"\ntp = 0\nargs = ["--api-key", "sk-secret-1", true]\n'
        'env = { HF_TOKEN = "hf_secret\\u0000" }\n',
    )
    assert "sk-secret-1" not in message and "hf_secret" not in message
    assert "env.HF_TOKEN: expected a string without NUL characters" in message
    assert "got a value not shown (a secret)" in message


def test_a_violation_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profiles='[profiles.eagle3]\nmodel-path = "m"\ntp = "two"\n')
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest_subprocess("--sglang-profiles=profiles.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert '[profiles.eagle3] tp: expected a tensor-parallel size 1..64, got "two"' in err
    assert "Traceback" not in err + result.stdout.str()
    assert "test_x" not in result.stdout.str()


# -- the options' values ---------------------------------------------------------------------


def test_every_kind_of_option_has_its_definition() -> None:
    from pytest_sglang.config.options import OPTIONS

    defs = read_schema("config")["$defs"]
    kinds = {s.ini: s.kind for s in OPTIONS if s.kind in defs}
    flags = {s.ini for s in OPTIONS if s.flag}
    timeouts = {s.ini for s in OPTIONS if s.name.endswith("-timeout")}
    assert flags and {kinds.get(ini) for ini in flags} == {"boolean"}
    assert len(timeouts) == 4 and {kinds.get(ini) for ini in timeouts} == {"duration"}
    for kind in set(kinds.values()):
        assert {"description", "fix"} <= set(defs[kind]) or kind == "duration"


def test_every_option_of_a_kind_names_a_setting() -> None:
    import dataclasses

    from pytest_sglang.config.options import OPTIONS
    from pytest_sglang.config.settings import Settings

    names = {f.name for f in dataclasses.fields(Settings)}
    converted = {s.dest.removeprefix("sglang_") for s in OPTIONS if s.kind}
    assert converted and converted <= names


def test_the_choices_in_the_schema_are_the_catalogue_s() -> None:
    from pytest_sglang.config.options import LAUNCHERS

    assert read_schema("config")["$defs"]["launcher"]["enum"] == list(LAUNCHERS)


@pytest.mark.parametrize(
    ("ini", "expected"),
    [
        ("sglang_require = maybe",
         "--sglang-require: 'maybe' is not a boolean (from ini option sglang_require in {ini}); "
         "use one of true, false, yes, no, on, off, 1, 0"),
        ("sglang_stall_timeout = 1e400",
         "sglang_stall_timeout: '1e400' is not a positive duration (from ini option "
         "sglang_stall_timeout in {ini}); give a timeout greater than zero, e.g. 600"),
        ("sglang_first_token_timeout = 2 weeks",
         "sglang_first_token_timeout: '2 weeks' is not a duration (from ini option "
         "sglang_first_token_timeout in {ini}); give seconds as a number, optionally with a "
         "unit: 90, 90s, 500ms, 10m, 1h"),
    ],
)  # fmt: skip
def test_an_ini_value_outside_the_schema_is_a_usage_error(
    pytester: pytest.Pytester, ini: str, expected: str
) -> None:
    path = pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert expected.format(ini=path) in result.stderr.str()


def test_a_flag_from_the_environment_is_checked_too(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_SGLANG_REQUIRE", "maybe")
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "--sglang-require: 'maybe' is not a boolean (from environment variable "
        "PYTEST_SGLANG_REQUIRE); use one of true" in result.stderr.str()
    )


def test_pyproject_ini_options_may_hold_toml_types(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(
        "[tool.pytest.ini_options]\nsglang_require = false\nsglang_ready_timeout = 90\n"
    )
    pytester.makepyfile(
        "def test_x(sglang_settings):\n"
        "    assert sglang_settings.require.value is False\n"
        "    assert sglang_settings.ready_timeout.value == 90.0\n"
    )
    pytester.runpytest().assert_outcomes(passed=1)


def test_the_schema_names_servers_and_expect_keys_as_the_command_line_does() -> None:
    from pytest_sglang.config.parsing import _EXPECT_KEY_RE
    from pytest_sglang.config.values import NAME_RE

    defs = read_schema("config")["$defs"]
    assert defs["profiles"]["propertyNames"]["pattern"] == NAME_RE.pattern
    assert defs["profile"]["properties"]["expect"]["propertyNames"]["pattern"] == (
        _EXPECT_KEY_RE.pattern
    )


def test_a_pyproject_section_that_is_no_table_is_a_usage_error(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool]\npytest-sglang = 3\n")
    with pytest.raises(pytest.UsageError, match=r"\[tool\.pytest-sglang\]: expected a table"):
        load_profiles(pyproject, None)
    pyproject.write_text('tool = "x"\n')  # no [tool] table: nothing of ours in it
    assert load_profiles(pyproject, None) == {}
