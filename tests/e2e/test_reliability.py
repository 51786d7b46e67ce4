"""Issue 18 end to end: secrets in no output, measurements never silently broken.

The fault matrix (``tests/faults``) covers servers that fail; this covers what every run
relies on: planted secrets appear in none of the outputs whichever path fails, error
budgets, the words for impossible settings, and the smaller items that were defects.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from pytest_sglang.config.values import Sourced
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.budget import Budget, broken_message
from pytest_sglang.measure.results import PackedRecords
from pytest_sglang.plugin import launch_line
from pytest_sglang.server.handle import LaunchInfo, StopReport, effective_max_running_requests
from pytest_sglang.testing import running_emulator
from tests.bench_data import result
from tests.faults.harness import leftovers, new_tag, write_profile

pytestmark = pytest.mark.slow

# -- planted secrets ------------------------------------------------------------------------

SECRETS = {
    "profile --api-key": "sk-profile-key-1729",
    "profile HF_TOKEN": "hf_profile_token_4104",
    "--sglang-api-key": "sk-cli-key-13832",
    "emulator --admin-api-key": "sk-emulator-key-20683",
    "server log api_key": "sk-logged-key-32832",
    "server log HF_TOKEN": "hf_logged_token_39312",
}

#: A "server" that logs as SGLang does on start-up (its arguments, keys included) and dies.
LOGS_AND_DIES = f"""
import sys
print("server_args=ServerArgs(model_path='m', tokenizer_path='m', "
      "api_key={SECRETS["server log api_key"]!r}, admin_api_key=None, port=1)", flush=True)
print("env: HF_TOKEN={SECRETS["server log HF_TOKEN"]} NCCL_DEBUG=INFO", flush=True)
print("  File main.py, line 3, in <module>: launch_server(" + " ".join(sys.argv[1:]) + ")")
sys.exit(3)
"""

#: Tests along every path that prints: a measurement (JSON, Markdown, JUnit properties), a
#: failing test with the settings and server among its locals (-l), a direct pool call that
#: raises with a traceback, and a failed launch (its message quotes the server's log).
SECRET_SUITE = """
import pytest
from pytest_sglang import Workload

@pytest.mark.sglang_profile("srv")
def test_measures(sglang_bench):
    sglang_bench("srv", Workload(input_len=8, output_len=4, requests=4), concurrency=2, repeats=1)

@pytest.mark.sglang_profile("srv")
def test_fails_with_locals(sglang_settings, sglang_server, sglang_client):
    profile = sglang_settings.profiles["srv"]
    key = sglang_settings.api_key
    assert sglang_client.get("/v1/models").status_code == 500

@pytest.mark.sglang_profile("dies")
def test_launch_fails(sglang_server):
    pass

def test_pool_raises(sglang_servers):
    sglang_servers.get("dies")
"""


def _profiles(tag: str, fake: Path) -> str:
    return f"""
        [tool.pytest-sglang.profiles.srv]
        model-path = "test-{tag}/model"
        args = ["--emulator-load-time", "0", "--emulator-warmup-time", "0",
                "--emulator-health-probe-time", "0", "--emulator-decode-ms", "1",
                "--api-key", "{SECRETS["profile --api-key"]}"]
        env = {{ HF_TOKEN = "{SECRETS["profile HF_TOKEN"]}" }}

        [tool.pytest-sglang.profiles.dies]
        model-path = "test-{tag}/dies"
        command = [{json.dumps(sys.executable)}, {json.dumps(str(fake))}]
        args = ["--api-key", "{SECRETS["profile --api-key"]}"]
        env = {{ HF_TOKEN = "{SECRETS["profile HF_TOKEN"]}" }}
    """


def _outputs(pytester: pytest.Pytester, out: str) -> dict[str, str]:
    files = {
        "terminal": out,
        "JSON report": (pytester.path / "r.json").read_text(),
        "Markdown": (pytester.path / "s.md").read_text(),
        "JUnit XML": (pytester.path / "j.xml").read_text(),
    }
    assert all(files.values()), {k: len(v) for k, v in files.items()}
    return files


def _leaks(outputs: dict[str, str]) -> list[str]:
    return [
        f"{what} ({secret}) in the {where}"
        for where, text in outputs.items()
        for what, secret in SECRETS.items()
        if secret in text
    ]


@pytest.mark.parametrize("launcher", ["emulator", "sglang"])
def test_planted_secrets_appear_in_no_output(pytester: pytest.Pytester, launcher: str) -> None:
    # Under the emulator launcher "srv" runs and "dies" is an emulator that fails its
    # warm-up; under the sglang launcher "srv" cannot start here and "dies" runs the fake
    # server above, whose log carries SGLang's server_args line.
    tag = new_tag()
    fake = pytester.path / "fake_server.py"
    fake.write_text(LOGS_AND_DIES)
    profiles = _profiles(tag, fake)
    if launcher == "emulator":
        profiles = profiles.replace(
            f'model-path = "test-{tag}/dies"',
            f'model-path = "test-{tag}/dies"\n        '
            'args = ["--emulator-fault", "crash-in-warmup", "--api-key", '
            f'"{SECRETS["profile --api-key"]}"]',
        ).replace(
            f'args = ["--api-key", "{SECRETS["profile --api-key"]}"]\n        env = {{ HF_TOKEN = '
            f'"{SECRETS["profile HF_TOKEN"]}" }}\n    ',
            f'env = {{ HF_TOKEN = "{SECRETS["profile HF_TOKEN"]}" }}\n    ',
        )
    pytester.makepyprojecttoml(profiles)
    pytester.makepyfile(test_secrets=SECRET_SUITE)
    result = pytester.runpytest(
        f"--sglang-launcher={launcher}", "-l", "-vv", "-rA",
        f"--sglang-api-key={SECRETS['--sglang-api-key']}",
        f"-osglang_emulator_args=--admin-api-key {SECRETS['emulator --admin-api-key']}",
        "--sglang-report=r.json", "--sglang-markdown=s.md", "--junitxml=j.xml",
    )  # fmt: skip
    out = result.stdout.str() + result.stderr.str()
    if launcher == "emulator":
        result.assert_outcomes(passed=1, failed=2, errors=1)
        assert "= Settings(servers=()" in out  # the locals were printed, redacted
        assert "--api-key ***" in out or "'--api-key', '***'" in out
    else:
        assert "exited with code 3" in out and "server_args=ServerArgs(" in out
        assert "api_key='***'" in out and "HF_TOKEN=***" in out
    assert _leaks(_outputs(pytester, out)) == []
    assert leftovers(tag) == []


def test_url_userinfo_is_refused_and_not_echoed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(sglang_server): pass\n")
    result = pytester.runpytest(
        "--sglang-url=http://ci:hunter2-pw@127.0.0.1:1",
        "--junitxml=j.xml",
        "--sglang-report=r.json",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "hunter2-pw" not in result.stdout.str() + result.stderr.str()
    assert "carries credentials" in result.stderr.str()
    assert not (pytester.path / "r.json").exists()


# -- error budgets and impossible values ----------------------------------------------------

BUDGET_SUITE = """
import pytest
from pytest_sglang import Workload, MeasurementFailed

W = Workload(input_len=8, output_len=4, requests=40, warmup=0)

def test_allowed(sglang_bench):
    result = sglang_bench("default", W, concurrency=4, repeats=1, allow_errors=0.9)
    assert result.runs[0].failed > 0

def test_not_allowed(sglang_bench):
    sglang_bench("default", W, concurrency=4, repeats=1)

def test_float_concurrency(sglang_bench):
    with pytest.raises(TypeError, match="concurrency must be a positive int or a list of them, "
                       "got float 2.0; write e.g. concurrency=8"):
        sglang_bench("default", W, concurrency=2.0)

def test_float_repeats(sglang_bench):
    with pytest.raises(TypeError, match="repeats must be a whole number of runs >= 1, got float"):
        sglang_bench("default", W, concurrency=2, repeats=2.5)

def test_bad_budget(sglang_bench):
    with pytest.raises(ValueError, match="allow_errors must be between 0 and 1"):
        sglang_bench("default", W, concurrency=2, allow_errors=5)
"""


def test_error_budget(pytester: pytest.Pytester, tmp_path: Path) -> None:
    with running_emulator(tmp_path, "--emulator-fault", "error-rate=0.3") as emulator:
        pytester.makepyfile(BUDGET_SUITE)
        result = pytester.runpytest(f"--sglang-url={emulator.url}", "--sglang-report=r.json")
    result.assert_outcomes(passed=4, failed=1)
    result.stdout.fnmatch_lines([
        "*test_not_allowed*",
        "the measurement of default @ C=4 (http://127.0.0.1:*) is broken: * of 40 measured "
        "requests failed (run 1: * of 40); no failed request is allowed",
        "  failures by kind (the server's answer quoted):",
        "    * x HTTP 500: *Internal server error: the request failed in the scheduler*",
        "  fix: *allow them: sglang_bench(..., allow_errors=0.05)",
    ])  # fmt: skip
    report = json.loads((pytester.path / "r.json").read_text())
    # The broken measurement is in the report too, with its errors.
    assert all(m["runs"][0]["failed"] > 0 for m in report["measurements"])


def test_a_word_when_c_exceeds_the_servers_cap(pytester: pytest.Pytester) -> None:
    tag = new_tag()
    write_profile(pytester, tag, ("--max-running-requests", "4"))
    pytester.makepyfile("""
        from pytest_sglang import Workload

        def test_c8(sglang_bench):
            sglang_bench("srv", Workload(input_len=8, output_len=4, requests=16), concurrency=8,
                         repeats=1)
    """)
    result = pytester.runpytest("--sglang-launcher=emulator")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "sglang: note: C=8 exceeds srv's max_running_requests of 4: 4 requests at a time wait "
        "in the server's queue, and their TTFT includes that wait"
    ])  # fmt: skip
    assert leftovers(tag) == []


def test_the_effective_cap_is_read_where_server_info_says_null() -> None:
    # The real server reports an argument that was not given as null.
    info = {
        "max_running_requests": None,
        "internal_states": [{"effective_max_running_requests_per_dp": 16}] * 2,
    }
    assert effective_max_running_requests(info) == 32
    assert effective_max_running_requests({"max_running_requests": 48}) == 48
    assert effective_max_running_requests({"max_running_requests": None}) is None


def test_negative_token_counts_break_the_measurement_and_not_the_table(
    pytester: pytest.Pytester,
) -> None:
    broken = result("liar", [-50.0, -40.0, -45.0])
    runs = tuple(dataclasses.replace(run, output_tokens=-8, records=()) for run in broken.runs)
    broken = dataclasses.replace(broken, runs=runs)
    assert "negative token counts" in (broken_message(broken, Budget()) or "")
    pytester.makepyfile(
        test_negative="""
        from pytest_sglang.report.entries import record
        from bench_data import result

        def test_records():
            record({"record": "measurement", **result("liar", [-50.0, -40.0, -45.0]).as_dict()})
        """
    )
    source = Path(__file__).parents[1].joinpath("bench_data.py").read_text()
    pytester.makepyfile(bench_data=source)
    out = pytester.runpytest("--sglang-markdown=s.md").stdout.str()
    table = out[out.index("sglang results") :]
    assert "-50" not in table and "-45" not in table and "-40" not in table
    assert "liar" in table
    assert "-4" not in (pytester.path / "s.md").read_text()


def test_failed_requests_message_names_counts_kinds_and_the_server() -> None:
    good = result("srv", [100.0])
    run = good.runs[0]
    records = (
        dataclasses.replace(run.records[0], error='HTTP 503: {"error": "overloaded"}'),
        run.records[1],
    )
    failing = dataclasses.replace(good, runs=(dataclasses.replace(run, failed=1, records=records),))
    message = broken_message(failing, Budget()) or ""
    assert "1 of 2 measured requests failed (run 1: 1 of 2)" in message
    assert '1 x HTTP 503: {"error": "overloaded"}' in message
    assert broken_message(failing, Budget(errors=0.5)) is None


# -- smaller items --------------------------------------------------------------------------


def test_the_launch_summary_never_prints_an_empty_cause() -> None:
    failed = LaunchInfo("p", "emulator", [], Path("l.log"), outcome="failed")
    assert launch_line(failed) == "  p [emulator] failed"
    failed.cause = "exited with code 1 during phase 'connect', 0.3s after launch"
    failed.stop = StopReport(seconds=0.01)
    assert launch_line(failed) == (
        "  p [emulator] failed: exited with code 1 during phase 'connect', 0.3s after "
        "launch; stopped in 0.01s"
    )
    forced = LaunchInfo("p", "sglang", [], Path("l.log"), outcome="stopped")
    forced.stop = StopReport(
        signals=["SIGTERM to the process group", "SIGKILL to the process group after 15s"],
        seconds=15.2,
    )
    assert "forced: SIGKILL to the process group after 15s" in launch_line(forced)


def test_the_session_cache_keeps_under_1kb_per_request() -> None:
    import gc
    import tracemalloc

    def record(i: int) -> RequestRecord:
        return RequestRecord(
            index=i, warmup=False, input_len=128, output_len=64, started=100.0 + i,
            sent=100.001 + i, end=102.0 + i, chunk_times=[100.5 + i + j / 64 for j in range(64)],
            chunk_tokens=[1] * 64, output_tokens_server=64, output_tokens_client=64,
            prompt_tokens=128, finish_reason="length", status=200,
        )  # fmt: skip

    records = [record(i) for i in range(5000)]
    gc.collect()
    tracemalloc.start()
    packed = PackedRecords(records)
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert size / len(records) < 1024, size / len(records)
    again = packed[4321]
    assert dataclasses.replace(again, chunk_times=[]) == dataclasses.replace(
        records[4321], chunk_times=[]
    )
    assert max(abs(a - b) for a, b in zip(again.chunk_times, records[4321].chunk_times,
                                          strict=True)) < 1e-6  # fmt: skip
    assert len(packed) == 5000 and list(packed[:2]) == [packed[0], packed[1]]


def test_secret_sourced_value_still_works() -> None:
    assert Sourced("k" * 9, "x", secret=True).value == "k" * 9
