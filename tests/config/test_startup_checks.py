"""Mistakes caught before any test runs (issue 18): output paths, URLs, profiles.

Each was a real failure: a report path in /proc ended the session after the first
measurement (INTERNALERROR), ``--sglang-report=/dev/stdout`` replaced a CI log, a symlink
was written through, a FIFO hung the run, ``user:pw@`` in a URL leaked into reports, and a
deep ``extends`` chain or an env name with ``=`` crashed the plugin.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.config.test_settings import usage_error

PLAIN = "def test_plain(): pass\n"


def test_report_in_proc_is_a_usage_error_before_any_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLAIN)
    errors = usage_error(pytester, "--sglang-report=/proc/x/r.json")
    assert "--sglang-report: '/proc/x/r.json' cannot be written: the directory to create it " in (
        errors
    )
    assert "(from --sglang-report on the command line)" in errors


def test_unwritable_directory_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLAIN)
    locked = pytester.mkdir("locked")
    locked.chmod(0o555)
    try:
        errors = usage_error(pytester, f"--sglang-markdown={locked}/summary.md")
    finally:
        locked.chmod(0o755)
    assert f"its directory {locked} is not writable" in errors


@pytest.mark.parametrize("kind", ["symlink", "fifo", "dev-stdout", "directory"])
def test_what_is_not_a_regular_file_is_refused_and_kept(
    pytester: pytest.Pytester, tmp_path: Path, kind: str
) -> None:
    pytester.makepyfile(PLAIN)
    target = tmp_path / "victim.log"
    target.write_text("the CI log\n")
    path = pytester.path / "report.json"
    if kind == "symlink":  # planted in a shared /tmp by someone else
        path.symlink_to(target)
        expected = f"is a symbolic link (to {target})"
    elif kind == "fifo":
        os.mkfifo(path)
        expected = "is a FIFO (named pipe)"
    elif kind == "directory":
        path.mkdir()
        expected = "is a directory"
    else:
        path = Path("/dev/stdout")
        expected = "is a symbolic link"
    for option in ("--sglang-report", "--sglang-markdown"):
        errors = usage_error(pytester, f"{option}={path}")
        assert f"{option}: '{path}' {expected}" in errors, errors
        assert "give the path of a regular file" in errors
    assert target.read_text() == "the CI log\n"
    if kind == "fifo":
        assert stat.S_ISFIFO(os.lstat(path).st_mode)


def test_an_existing_regular_file_and_a_new_directory_are_fine(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(PLAIN)
    (pytester.path / "old.json").write_text("{}")
    result = pytester.runpytest("--sglang-report=old.json", "--sglang-markdown=new/dir/s.md")
    result.assert_outcomes(passed=1)


def test_url_with_userinfo_is_refused_without_echoing_the_password(
    pytester: pytest.Pytester,
) -> None:
    errors = usage_error(pytester, "--sglang-url=http://alice:pw-never-shown@gpu-host:30000")
    assert "pw-never-shown" not in errors and "alice" not in errors
    assert "--sglang-url: URL 'http://***@gpu-host:30000' carries credentials" in errors
    assert "give the URL without them, e.g. http://gpu-host:30000" in errors
    assert "--sglang-api-key" in errors


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        ('env = { "A=B" = "1" }', "env: expected an environment variable name (not empty, no"),
        ('env = { "A\\u0000B" = "1" }', 'which no environment can hold), got name "A\\u0000B"'),
        ('env = { "" = "1" }', "env: expected an environment variable name"),
        ('env = { A = "x\\u0000y" }', "env.A: expected a string without NUL characters"),
        ('expect = { "" = 1 }', "expect: expected model_id, max_model_len or a /server_info key"),
        (
            'expect = { "tp size" = 8 }',
            "tp_size (letters, digits and '_', no spaces), got name \"tp size\"",
        ),
    ],
)
def test_profile_env_and_expect_keys_are_validated(
    pytester: pytest.Pytester, table: str, expected: str
) -> None:
    pytester.makepyprojecttoml(f'[tool.pytest-sglang.profiles.p]\nmodel-path = "m"\n{table}\n')
    pytester.makepyfile(PLAIN)
    assert expected in usage_error(pytester)


def test_a_deep_extends_chain_is_a_usage_error(pytester: pytest.Pytester) -> None:
    # 5000 profiles, each extending the next: Python's recursion limit was the error.
    lines = ['[tool.pytest-sglang.profiles.p0]\nmodel-path = "m"\n']
    lines += [f'[tool.pytest-sglang.profiles.p{i}]\nextends = "p{i - 1}"\n' for i in range(1, 5000)]
    pytester.makepyprojecttoml("\n".join(lines))
    pytester.makepyfile(PLAIN)
    errors = usage_error(pytester)
    assert "the extends chain is more than 32 profiles deep" in errors
    assert "INTERNALERROR" not in errors and "RecursionError" not in errors


def test_settings_shown_by_pytest_l_hide_the_secrets(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml("""
        [tool.pytest-sglang.profiles.p]
        model-path = "m"
        args = ["--api-key", "sk-args-3141"]
        env = { HF_TOKEN = "hf_env_2718" }
    """)
    pytester.makepyfile("""
        def test_fails(sglang_settings):
            key = sglang_settings.api_key
            profile = sglang_settings.profiles["p"]
            assert False
    """)
    result = pytester.runpytest(
        "-l", "-vv", "--sglang-api-key=sk-cli-1618", "-osglang_emulator_args=--api-key sk-emu-1"
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "= Settings(servers=()" in out and "= Profile(name='p'" in out
    assert "api_key=Sourced(value='***'" in out
    for secret in ("sk-args-3141", "hf_env_2718", "sk-cli-1618", "sk-emu-1"):
        assert secret not in out, secret
