"""Options, their precedence and every configuration error, through pytester (in process)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("default")

USES_SERVER = """
def test_uses_server(sglang_server):
    pass
"""

SHOWS_SETTINGS = """
def test_show(sglang_settings):
    s = sglang_settings
    print("SERVERS", [(x.name, x.url, x.source) for x in s.servers])
    print("TIMEOUT", s.ready_timeout.value, s.ready_timeout.source)
    print("REQUIRE", s.require.value, s.require.source)
    print("EXPECT", [(e.server, e.key, e.value, e.source) for e in s.expectations])
    print("REQUEST", s.request_timeout.value, s.request_timeout.source)
    print("STALL", s.stall_timeout.value, s.stall_timeout.source)
"""


def usage_error(pytester: pytest.Pytester, *args: str) -> str:
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    return result.stderr.str()


def settings_output(pytester: pytest.Pytester, *args: str) -> str:
    pytester.makepyfile(test_show=SHOWS_SETTINGS)
    result = pytester.runpytest("-s", *args)
    result.assert_outcomes(passed=1)
    return result.stdout.str()


# -- precedence: CLI > env > ini > default -------------------------------------------------


def test_defaults(pytester: pytest.Pytester) -> None:
    out = settings_output(pytester)
    assert "SERVERS []" in out
    assert "TIMEOUT 600.0 default" in out
    assert "REQUIRE False default" in out
    assert "REQUEST 600.0 default" in out
    assert "STALL 60.0 default" in out


def test_ini_value_is_used_and_named(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nsglang_ready_timeout = 2m\nsglang_url =\n  a=http://h:1\n")
    out = settings_output(pytester)
    assert "TIMEOUT 120.0 ini option sglang_ready_timeout in" in out
    assert "('a', 'http://h:1', 'ini option sglang_url in" in out


def test_env_beats_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\nsglang_ready_timeout = 2m\n")
    monkeypatch.setenv("PYTEST_SGLANG_READY_TIMEOUT", "45")
    monkeypatch.setenv("PYTEST_SGLANG_URL", "a=http://h:1  b=https://h:2/")
    out = settings_output(pytester)
    assert "TIMEOUT 45.0 environment variable PYTEST_SGLANG_READY_TIMEOUT" in out
    assert "('b', 'https://h:2', 'environment variable PYTEST_SGLANG_URL')" in out


def test_cli_beats_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_SGLANG_READY_TIMEOUT", "45")
    monkeypatch.setenv("PYTEST_SGLANG_REQUIRE", "no")
    out = settings_output(pytester, "--sglang-ready-timeout=500ms", "--sglang-require")
    assert "TIMEOUT 0.5 --sglang-ready-timeout on the command line" in out
    assert "REQUIRE True --sglang-require on the command line" in out


def test_measurement_timeouts_from_each_source(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeini("[pytest]\nsglang_request_timeout = 20m\nsglang_stall_timeout = 30\n")
    monkeypatch.setenv("PYTEST_SGLANG_STALL_TIMEOUT", "90s")
    out = settings_output(pytester, "-osglang_request_timeout=1h")
    assert "REQUEST 3600.0 -o sglang_request_timeout on the command line" in out
    assert "STALL 90.0 environment variable PYTEST_SGLANG_STALL_TIMEOUT" in out
    assert "sglang: request-timeout: 3600s (from -o sglang_request_timeout on the command " in out


def test_repeatable_url_and_default_name(pytester: pytest.Pytester) -> None:
    out = settings_output(pytester, "--sglang-url=http://h:1", "--sglang-url=eagle3=http://h:2")
    assert "('default', 'http://h:1'" in out
    assert "('eagle3', 'http://h:2'" in out


def test_expectations_parse_json_or_string(pytester: pytest.Pytester) -> None:
    out = settings_output(
        pytester,
        "--sglang-url=eagle3=http://h:2",
        "--sglang-expect=tp_size=8",
        "--sglang-expect=eagle3:speculative_algorithm=EAGLE3",
        "--sglang-expect=model_id=org/model:v1",
    )
    assert "(None, 'tp_size', 8," in out
    assert "('eagle3', 'speculative_algorithm', 'EAGLE3'," in out
    assert "(None, 'model_id', 'org/model:v1'," in out


# -- every error names the option, the source and the fix -----------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--sglang-url=localhost:30000"],
            "--sglang-url: URL 'localhost:30000' has no http:// or https:// scheme "
            "(from --sglang-url on the command line); write it with a scheme, e.g. "
            "http://localhost:30000",
        ),
        (["--sglang-url=ftp://h:1"], "has scheme 'ftp', not http or https"),
        (["--sglang-url=http://:30000"], "has no host"),
        (["--sglang-url=http://h:99999"], "has an invalid port"),
        (["--sglang-url=http://h:1/?x=1"], "has a query or fragment"),
        (["--sglang-url=bad name=http://h:1"], "server name 'bad name'"),
        (
            ["--sglang-url=http://h:1", "--sglang-url=http://h:2"],
            "server name 'default' is given twice (http://h:1 and http://h:2)",
        ),
        (
            ["--sglang-ready-timeout=-5"],
            "--sglang-ready-timeout: '-5' is not a positive duration (from "
            "--sglang-ready-timeout on the command line); give a timeout greater than zero",
        ),
        (["--sglang-ready-timeout=0"], "'0' is not a positive duration"),
        (["--sglang-ready-timeout=soon"], "'soon' is not a duration"),
        (["-osglang_request_timeout=0s"], "sglang_request_timeout: '0s' is not a positive"),
        (["-osglang_stall_timeout=never"], "sglang_stall_timeout: 'never' is not a duration"),
        (["--sglang-expect=tp_size"], "--sglang-expect: 'tp_size' is not KEY=VALUE"),
        (["--sglang-expect=tp size=8"], "key 'tp size'"),
        (
            ["--sglang-url=a=http://h:1", "--sglang-expect=b:tp_size=8"],
            "names server 'b', which is not among the attached servers (a)",
        ),
    ],
)
def test_cli_errors(pytester: pytest.Pytester, args: list[str], expected: str) -> None:
    assert expected in usage_error(pytester, *args)


def test_env_error_names_the_variable(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_SGLANG_REQUIRE", "maybe")
    err = usage_error(pytester)
    assert (
        "--sglang-require: 'maybe' is not a boolean (from environment variable "
        "PYTEST_SGLANG_REQUIRE); use one of true, false" in err
    )


def test_ini_error_names_the_file(pytester: pytest.Pytester) -> None:
    ini = pytester.makeini("[pytest]\nsglang_ready_timeout = forever\n")
    err = usage_error(pytester)
    assert f"(from ini option sglang_ready_timeout in {ini})" in err


# -- help, header, markers, disabling ------------------------------------------------------


def test_help_does_not_validate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # A bad environment must not stop a user from reading --help.
    monkeypatch.setenv("PYTEST_SGLANG_READY_TIMEOUT", "-1")
    assert pytester.runpytest("--help").ret == pytest.ExitCode.OK


def test_header_redacts_the_api_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest(
        "--sglang-url=http://h:1", "--sglang-api-key=sk-very-secret", "--sglang-expect=tp_size=8"
    )
    out = result.stdout.str()
    assert "sglang: servers: default=http://h:1 (from --sglang-url on the command line)" in out
    assert "api-key: set, redacted (from --sglang-api-key on the command line)" in out
    assert "sglang: expect: tp_size=8" in out
    assert "sk-very-secret" not in out


def test_markers_are_documented(pytester: pytest.Pytester) -> None:
    out = pytester.runpytest("--markers").stdout.str()
    assert "@pytest.mark.sglang_profile(name):" in out
    assert "@pytest.mark.sglang_expect(**key_values):" in out


def test_fixtures_are_documented(pytester: pytest.Pytester) -> None:
    out = pytester.runpytest("--fixtures").stdout.str()
    for fixture in ("sglang_server", "sglang_client", "sglang_servers", "sglang_settings"):
        assert fixture in out
    assert "The ready SGLang server this test runs against" in out


def test_disabled_with_p_no_sglang(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_SERVER)
    result = pytester.runpytest("-p", "no:sglang")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'sglang_server' not found*"])
    assert pytester.runpytest("-p", "no:sglang", "--sglang-url=x").ret == (
        pytest.ExitCode.USAGE_ERROR
    )


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ("@pytest.mark.sglang_profile()", "sglang_profile takes exactly one server name"),
        ("@pytest.mark.sglang_profile(name='a')", "sglang_profile takes exactly one"),
        ("@pytest.mark.sglang_profile('a b')", "not a valid server name"),
        ("@pytest.mark.sglang_expect('tp_size')", "sglang_expect takes keyword arguments only"),
    ],
)
def test_bad_markers_stop_collection(pytester: pytest.Pytester, marker: str, expected: str) -> None:
    pytester.makepyfile(f"import pytest\n\n{marker}\ndef test_x(sglang_server): pass\n")
    err = usage_error(pytester, "--collect-only")
    assert "test_bad_markers_stop_collection.py::test_x" in err
    assert expected in err


# -- no server: skip with a hint, or fail under --sglang-require ---------------------------


def test_no_server_skips_with_hint(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_SERVER)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no SGLang server configured: attach one with --sglang-url*"])


def test_no_server_fails_under_require(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_SERVER)
    result = pytester.runpytest("--sglang-require")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no SGLang server configured*--sglang-require is set*"])


def test_unknown_profile_skips_naming_the_attached_ones(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        "import pytest\n\n@pytest.mark.sglang_profile('eagle3')\ndef test_x(sglang_server): pass\n"
    )
    result = pytester.runpytest("-rs", "--sglang-url=baseline=http://127.0.0.1:9")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["*no SGLang server or profile named 'eagle3' is configured (known: baseline)*"]
    )


def test_unmarked_tests_run_once_per_server(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(USES_SERVER)
    result = pytester.runpytest(
        "--collect-only", "-q", "--sglang-url=a=http://127.0.0.1:9",
        "--sglang-url=b=http://127.0.0.1:9",
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*test_uses_server[[]a[]]", "*test_uses_server[[]b[]]"])
    # With a server called "default", unmarked tests use it and are not multiplied.
    result = pytester.runpytest(
        "--collect-only", "-q", "--sglang-url=http://127.0.0.1:9",
        "--sglang-url=b=http://127.0.0.1:9",
    )  # fmt: skip
    result.stdout.fnmatch_lines(["*::test_uses_server", "1 test collected*"])


TRIPWIRE = """
import socket, subprocess

def _forbidden(*args, **kwargs):
    raise AssertionError("pytest-sglang touched the network or started a process")

socket.socket.connect = _forbidden
socket.create_connection = _forbidden
subprocess.Popen.__init__ = _forbidden
"""


@pytest.mark.parametrize("mode", ["--collect-only", "--help"])
def test_collect_only_and_help_start_nothing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # Only our plugin is loaded: other installed plugins may legitimately start processes.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(TRIPWIRE)
    pytester.makepyfile(USES_SERVER)
    result = pytester.runpytest_subprocess(
        "-p", "sglang", mode, "--sglang-url=http://127.0.0.1:9", "--sglang-require"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    assert "touched the network" not in result.stdout.str() + result.stderr.str()


def test_ini_paths_are_relative_to_the_ini_file(pytester: pytest.Pytester) -> None:
    # pytest run from a subdirectory: paths in the ini file still mean what they say there.
    pytester.makeini("[pytest]\nsglang_gpu_fake = gpus\nsglang_report = out/r.json\n")
    pytester.mkdir("gpus")
    pytester.mkdir("out")
    sub = pytester.mkdir("sub")
    sub.joinpath("test_show.py").write_text(
        "def test_show(sglang_settings):\n"
        "    print('FAKE', sglang_settings.gpu_fake.value)\n"
        "    print('REPORT', sglang_settings.report.value)\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        result = pytester.runpytest("-s", "--rootdir", str(pytester.path))
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert f"FAKE {pytester.path / 'gpus'}" in out
    assert f"REPORT {pytester.path / 'out' / 'r.json'}" in out


def test_command_line_paths_are_relative_to_the_invocation_dir(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\n")
    sub = pytester.mkdir("sub")
    sub.joinpath("gpus").mkdir()
    sub.joinpath("test_show.py").write_text(
        "def test_show(sglang_settings):\n    print('FAKE', sglang_settings.gpu_fake.value)\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        result = pytester.runpytest("-s", "-osglang_gpu_fake=gpus")
    result.assert_outcomes(passed=1)
    assert f"FAKE {sub / 'gpus'}" in result.stdout.str()
