"""Attach mode end to end: the readiness gate against the emulator as a real process."""

from __future__ import annotations

import ssl
from collections.abc import Callable

import httpx
import pytest

from pytest_sglang.server.readiness import ReadinessGate
from pytest_sglang.testing import EmulatorProcess

Start = Callable[..., EmulatorProcess]

IDENTITY = """
import pytest

def test_identity(sglang_server, sglang_client):
    print("PHASES", dict(sglang_server.readiness.phases))
    print("VERSION", sglang_server.version)
    assert sglang_server.model.id == "emulated/Llama-3.1-8B-Instruct"
    assert sglang_client.get("/v1/models").status_code == 200
"""


def run(pytester: pytest.Pytester, emulator: EmulatorProcess, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_identity=IDENTITY)
    return pytester.runpytest("-s", f"--sglang-url={emulator.url}", "--sglang-require", *args)


def test_passes_against_a_ready_emulator(pytester: pytest.Pytester, start_emulator: Start) -> None:
    result = run(pytester, start_emulator())
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["VERSION 0.5.23"])


def test_waits_through_loading_and_warmup(pytester: pytest.Pytester, start_emulator: Start) -> None:
    # Started without waiting: the gate meets the closed port, then 503s, then readiness.
    emulator = start_emulator("--emulator-load-time", "3", "--emulator-warmup-time", "2", wait=None)
    result = run(pytester, emulator, "--sglang-ready-timeout=60")
    result.assert_outcomes(passed=1)
    phases = eval(result.stdout.str().split("PHASES ", 1)[1].splitlines()[0])
    assert list(phases) == ["connect", "health", "models", "identity", "server_info"]
    # Generous bounds: the port stays closed >= 3 s and health answers 503 for >= 2 s.
    assert phases["connect"] > 0.5
    assert phases["health"] > 1.0
    assert "The server is fired up and ready to roll!" in emulator.log()


def test_old_server_surface(pytester: pytest.Pytester, start_emulator: Start) -> None:
    result = run(
        pytester, start_emulator("--emulator-version", "0.5.5"), "--sglang-expect=tp_size=1"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["VERSION 0.5.5*"])


def test_malformed_models_names_the_json_path(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    result = run(pytester, start_emulator("--emulator-fault", "malformed-models"))
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*phase 'models' failed after*GET /v1/models returned a body that breaks the "
            "model-list schema: 2 violations of v1_models.schema.json:",
            "  at $.data[0]: 'object' is a required property",
            "    in: {*",
            "  at $.data[0].max_model_len: '131072' is not of type 'integer', 'null'",
            "*endpoints tried in phase 'models': GET /v1/models -> 200",
        ]
    )


def test_never_ready_fails_at_deadline(pytester: pytest.Pytester, start_emulator: Start) -> None:
    result = run(
        pytester,
        start_emulator("--emulator-fault", "never-ready", wait="port"),
        "--sglang-ready-timeout=2",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*phase 'health' failed after 2.*s: not passed within the ready timeout of 2s "
            "(from --sglang-ready-timeout on the command line)*",
            "*last response: GET /ready -> 503 with empty body*",
        ]
    )


def test_hang_fails_at_deadline(pytester: pytest.Pytester, start_emulator: Start) -> None:
    result = run(
        pytester,
        start_emulator("--emulator-fault", "hang", wait="port"),
        "--sglang-ready-timeout=2",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*phase 'connect' failed*",
            "*no answer within*",
            "*accepts connections but nothing answers*",
        ]
    )


@pytest.mark.parametrize("fault", ["crash-in-warmup", "context-length-mismatch"])
def test_server_that_dies_is_never_ready(
    pytester: pytest.Pytester, start_emulator: Start, fault: str
) -> None:
    emulator = start_emulator("--emulator-fault", fault, wait=None)
    result = run(pytester, emulator, "--sglang-ready-timeout=5")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*is not ready: phase*", "*Connect*"])
    assert emulator.process.wait(10) != 0


def test_wrong_max_model_len(pytester: pytest.Pytester, start_emulator: Start) -> None:
    result = run(
        pytester,
        start_emulator("--context-length", "32768"),
        "--sglang-expect=max_model_len=262144",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*phase 'identity' failed*",
            "*max_model_len: expected 262144 (from --sglang-expect on the command line), "
            "/v1/models reports 32768*",
        ]
    )


def test_wrong_server_info_value(pytester: pytest.Pytester, start_emulator: Start) -> None:
    result = run(
        pytester,
        start_emulator("--tp", "2"),
        "--sglang-expect=tp_size=8",
        "--sglang-expect=speculative_algorithm=EAGLE3",
    )
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        [
            "*phase 'server_info' failed*",
            "*tp_size: expected 8 (from --sglang-expect on the command line), "
            "/server_info reports 2*",
            '*speculative_algorithm: expected "EAGLE3"*reports null*',
        ]
    )


@pytest.mark.parametrize(("topk", "outcome"), [("1", "passed"), ("2", "errors")])
def test_expect_adaptive_speculation_on(
    pytester: pytest.Pytester, start_emulator: Start, topk: str, outcome: str
) -> None:
    draft_tokens = "4" if topk == "1" else "6"
    emulator = start_emulator(
        "--speculative-algorithm", "EAGLE3", "--speculative-adaptive", "--speculative-num-steps",
        "3", "--speculative-eagle-topk", topk, "--speculative-num-draft-tokens", draft_tokens,
    )  # fmt: skip
    result = run(pytester, emulator, "--sglang-expect=speculative_adaptive=true")
    result.assert_outcomes(**{outcome: 1})
    if outcome == "errors":
        result.stdout.fnmatch_lines(
            [
                "*speculative_adaptive: expected true*reports false: SGLang turned adaptive "
                "speculation off at start-up*--speculative-eagle-topk 1*"
            ]
        )


def test_matching_expectations_pass(pytester: pytest.Pytester, start_emulator: Start) -> None:
    emulator = start_emulator(
        "--tp", "2", "--speculative-algorithm", "EAGLE3", "--context-length", "65536"
    )
    result = run(
        pytester,
        emulator,
        "--sglang-expect=tp_size=2",
        "--sglang-expect=speculative_algorithm=EAGLE3",
        "--sglang-expect=max_model_len=65536",
        "--sglang-expect=max_running_requests=48",
    )
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], "*the server was started with --api-key; pass the same key with --sglang-api-key*"),
        (["--sglang-api-key=wrong"], "*the server rejects the API key given*"),
    ],
)
def test_api_key_problems(
    pytester: pytest.Pytester, start_emulator: Start, given: list[str], expected: str
) -> None:
    result = run(pytester, start_emulator("--api-key", "sk-right"), *given)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*phase 'models' failed*401 Unauthorized" + expected])
    assert "sk-right" not in result.stdout.str()


def test_api_key_is_used_by_gate_and_client(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    result = run(pytester, start_emulator("--api-key", "sk-right"), "--sglang-api-key=sk-right")
    result.assert_outcomes(passed=1)


def test_failed_gate_is_not_polled_again(pytester: pytest.Pytester, start_emulator: Start) -> None:
    emulator = start_emulator("--emulator-fault", "never-ready", wait="port")
    pytester.makepyfile("def test_a(sglang_server): pass\n\ndef test_b(sglang_server): pass\n")
    result = pytester.runpytest(
        f"--sglang-url={emulator.url}", "--sglang-ready-timeout=2", "--durations=0", "-vv"
    )
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(
        ["*this server failed earlier in the session; it is not tried again*"]
    )
    # Only the first setup waited for the deadline.
    setups = [line for line in result.stdout.lines if "s setup " in line]
    assert len(setups) == 2 and float(setups[1].split("s", 1)[0]) < 1.0, setups


def test_profiles_pick_servers_and_marker_expectations(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    base = start_emulator()
    spec = start_emulator("--speculative-algorithm", "EAGLE3")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.sglang_profile("baseline")
        @pytest.mark.sglang_expect(speculative_algorithm=None)
        def test_base(sglang_server):
            assert sglang_server.name == "baseline"

        @pytest.mark.sglang_profile("eagle3")
        @pytest.mark.sglang_expect(speculative_algorithm="EAGLE3", max_running_requests=48)
        def test_spec(sglang_server):
            assert sglang_server.name == "eagle3"

        @pytest.mark.sglang_profile("baseline")
        @pytest.mark.sglang_expect(tp_size=8)
        def test_marker_mismatch(sglang_server):
            pass
    """)
    result = pytester.runpytest(
        f"--sglang-url=baseline={base.url}", f"--sglang-url=eagle3={spec.url}"
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*does not match this test's expectations*",
            "*tp_size: expected 8 (from @pytest.mark.sglang_expect on "
            "test_profiles_pick_servers_and_marker_expectations.py::test_marker_mismatch)*",
        ]
    )


def test_a_plain_http_gate_loads_no_ca_store(
    start_emulator: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading the CA bundle is most of what building a client costs, and plain HTTP never
    # makes a TLS connection.
    emulator = start_emulator()
    loads: list[object] = []
    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda *args: loads.append(args))
    server = ReadinessGate("default", emulator.url, timeout=30.0).wait()
    assert server.model.id == "emulated/Llama-3.1-8B-Instruct"
    assert loads == []


def test_a_markers_context_length_is_checked_against_the_served_max_model_len(
    pytester: pytest.Pytester, start_emulator: Start
) -> None:
    # SGLang reports ``context_length: null`` in /server_info when it was not given; the
    # effective value is /v1/models' max_model_len, for a test's marker as for the gate.
    server = start_emulator()
    served = httpx.get(f"{server.url}/v1/models").json()["data"][0]["max_model_len"]
    assert httpx.get(f"{server.url}/server_info").json()["context_length"] is None
    pytester.makepyfile(f"""
        import pytest

        @pytest.mark.sglang_expect(context_length={served})
        def test_served(sglang_server):
            pass

        @pytest.mark.sglang_expect(context_length={served + 1})
        def test_other(sglang_server):
            pass
    """)
    result = pytester.runpytest(f"--sglang-url={server.url}")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*context_length: expected {served + 1}*{served}*"])
