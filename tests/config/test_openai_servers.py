"""Declaring OpenAI-compatible servers and per-server headers: parsing, targets, the header
line, redaction (issue 13)."""

from __future__ import annotations

import pytest

from pytest_sglang.config.options import HEADER, URL
from pytest_sglang.config.parsing import parse_header, parse_server_url
from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import Header

SECRET = "sk-very-secret-value"

SHOWS_TARGETS = """
def test_show(sglang_settings):
    for name, t in sglang_settings.targets.items():
        print("TARGET", name, t.url, t.kind, sorted(t.header_map))
    print("REPR", repr(sglang_settings))
"""


def test_openai_prefix_declares_the_kind() -> None:
    server = parse_server_url(URL, "vllm=openai+http://gpu:8000/", "cli")
    assert (server.name, server.url, server.kind) == ("vllm", "http://gpu:8000", "openai")
    assert parse_server_url(URL, "openai+https://h:1", "cli").kind == "openai"
    assert parse_server_url(URL, "http://h:1", "cli").kind == "sglang"


def test_a_wrong_scheme_after_the_prefix_is_refused() -> None:
    with pytest.raises(pytest.UsageError, match="scheme 'ftp', not http or https"):
        parse_server_url(URL, "x=openai+ftp://h:1", "cli")


def test_headers_parse_per_server_or_for_all() -> None:
    header = parse_header(f"vllm:Authorization=Bearer {SECRET}", "cli")
    assert (header.server, header.name, header.value) == (
        "vllm",
        "Authorization",
        f"Bearer {SECRET}",
    )
    assert SECRET not in repr(header) and header.describe() == "vllm:Authorization=***"
    everyone = parse_header("X-Api-Key=a=b:c", "cli")
    assert (everyone.server, everyone.name, everyone.value) == (None, "X-Api-Key", "a=b:c")


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("Authorization", "not HEADER=VALUE"),
        # "Name: value" by mistake: a value without "Bearer" escapes the redaction rule.
        (f"vllm:X-Api-Key: {SECRET}", "not HEADER=VALUE"),
        ("bad/name=1", "'bad/name' is not an HTTP header name"),
        (f"Api Key {SECRET}=1", "the text before '=' is not an HTTP header name"),
        ("-x:Auth=1", "server name '-x' before 'Auth' is not valid"),
    ],
)
def test_bad_headers_say_what_and_how(raw: str, problem: str) -> None:
    with pytest.raises(pytest.UsageError) as info:
        parse_header(raw, "cli")
    assert problem in str(info.value) and str(info.value).startswith(HEADER.label)
    assert SECRET not in str(info.value)  # "Name: value" written by mistake is not echoed


def test_targets_get_their_own_headers_and_the_shared_ones() -> None:
    servers = (parse_server_url(URL, "vllm=openai+http://h:1", "cli"),
               parse_server_url(URL, "base=http://h:2", "cli"))  # fmt: skip
    headers = (Header("X-All", "1", "cli"), Header("Authorization", "b", "cli", server="vllm"))
    targets = Settings(servers, headers=headers).targets
    assert targets["vllm"].kind == "openai" and targets["base"].kind == "sglang"
    assert targets["vllm"].header_map == {"X-All": "1", "Authorization": "b"}
    assert targets["base"].header_map == {"X-All": "1"}


def test_settings_header_line_and_redaction(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_show=SHOWS_TARGETS)
    result = pytester.runpytest(
        "-s",
        "--sglang-url=vllm=openai+http://h:1",
        "--sglang-url=base=http://h:2",
        f"--sglang-header=vllm:Authorization=Bearer {SECRET}",
    )
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "TARGET vllm http://h:1 openai ['Authorization']" in out
    assert "TARGET base http://h:2 sglang []" in out
    assert "sglang: servers: vllm=openai+http://h:1, base=http://h:2" in out
    assert "sglang: headers: vllm:Authorization=***" in out
    assert SECRET not in out


def test_a_header_for_an_unknown_server_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--sglang-url=a=http://h:1", f"--sglang-header=b:X-Key={SECRET}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "names server 'b', which is neither attached nor a profile (a)" in err
    assert SECRET not in err


def test_a_profile_declares_its_kind(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".toml",
        profiles='[profiles.vllm]\nkind = "openai"\n\n[profiles.bad]\nmodel-path = "m"\n',
    )
    pytester.makepyfile(test_show=SHOWS_TARGETS)
    result = pytester.runpytest("-s", "--sglang-profiles=profiles.toml",
                                "--sglang-url=vllm=http://h:1")  # fmt: skip
    result.assert_outcomes(passed=1)
    assert "TARGET vllm http://h:1 openai []" in result.stdout.str()
    pytester.makefile(".toml", profiles='[profiles.x]\nkind = "tgi"\n')
    result = pytester.runpytest("--sglang-profiles=profiles.toml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert '[profiles.x] kind: expected a server kind: "sglang", or "openai"' in result.stderr.str()
    assert 'got "tgi"' in result.stderr.str()


def test_an_openai_profile_is_never_launched(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", profiles='[profiles.vllm]\nkind = "openai"\n')
    pytester.makepyfile("def test_it(sglang_server):\n    pass\n")
    result = pytester.runpytest("--sglang-profiles=profiles.toml", "--sglang-launcher=emulator",
                                "-rs")  # fmt: skip
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        "*cannot launch profile 'vllm': it is declared kind = \"openai\": the plugin launches "
        "SGLang only; start that server yourself and attach it under the profile's name*"
    ])  # fmt: skip
