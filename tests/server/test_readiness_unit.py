"""The readiness gate against scripted servers (httpx.MockTransport and a fake clock)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from pytest_sglang.config.values import Expectation
from pytest_sglang.errors import IdentityMismatch, SchemaMismatch, ServerNotReady
from pytest_sglang.server.probing import Prober
from pytest_sglang.server.readiness import (
    MAX_CHEAP_POLL_INTERVAL,
    MAX_POLL_INTERVAL,
    QUICK_PROBE_TIMEOUT,
    ReadinessGate,
)
from tests.fake_clock import FakeClock

MODELS: dict[str, Any] = {
    "object": "list",
    "data": [
        {
            "id": "org/model",
            "object": "model",
            "created": 1,
            "owned_by": "sglang",
            "root": "org/model",
            "parent": None,
            "max_model_len": 131072,
        }
    ],
}
SERVER_INFO = {
    "model_path": "org/model",
    "tp_size": 8,
    "version": "0.5.23",
    "internal_states": [{}],
    "speculative_algorithm": "EAGLE3",
}
MODEL_INFO = {"model_path": "org/model", "tokenizer_path": "org/model", "is_generation": True}


class ScriptedServer:
    """Answers like SGLang: closed until ``opens_at``, warming until ``ready_at``."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        opens_at: float = 0.0,
        ready_at: float = 0.0,
        old: bool = False,
        models: Any = MODELS,
        server_info: Any = SERVER_INFO,
        api_key: str | None = None,
    ) -> None:
        self.clock = clock
        self.opens_at = opens_at
        self.ready_at = ready_at
        self.old = old
        self.models = models
        self.server_info = server_info
        self.api_key = api_key
        self.paths: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.paths.append(path)
        if self.clock.now < self.opens_at:
            raise httpx.ConnectError("[Errno 111] Connection refused", request=request)
        exempt = path.startswith("/health") or (path == "/ready" and not self.old)
        if self.api_key and not exempt:
            if request.headers.get("authorization") != f"Bearer {self.api_key}":
                return httpx.Response(401, json={"error": "Unauthorized"})
        warming = self.clock.now < self.ready_at
        routes: dict[str, Callable[[], httpx.Response]] = {
            "/health_generate": lambda: httpx.Response(503 if warming else 200),
            "/v1/models": lambda: httpx.Response(200, json=self.models),
            "/get_server_info": lambda: httpx.Response(200, json=self.server_info),
            "/get_model_info": lambda: httpx.Response(200, json=MODEL_INFO),
        }
        if not self.old:
            routes["/ready"] = lambda: httpx.Response(503 if warming else 200)
            routes["/server_info"] = routes["/get_server_info"]
            routes["/model_info"] = routes["/get_model_info"]
        route = routes.get(path)
        return route() if route else httpx.Response(404, json={"detail": "Not Found"})


def gate(server: ScriptedServer, clock: FakeClock, **kwargs: Any) -> ReadinessGate:
    kwargs.setdefault("timeout", 60.0)
    return ReadinessGate(
        "default",
        "http://sglang.test",
        transport=httpx.MockTransport(server),
        clock=clock,
        sleep=clock.sleep,
        **kwargs,
    )


def expect(key: str, value: object) -> Expectation:
    return Expectation(key=key, value=value, source="--sglang-expect on the command line")


def test_waits_through_load_and_warmup() -> None:
    clock = FakeClock()
    server = ScriptedServer(clock, opens_at=5.0, ready_at=9.0)
    ready = gate(server, clock).wait()
    assert list(ready.readiness.phases) == [
        "connect",
        "health",
        "models",
        "identity",
        "server_info",
    ]
    # The polls back off to MAX_POLL_INTERVAL: each change is noticed within one interval.
    slack = MAX_POLL_INTERVAL + 0.01
    assert ready.readiness.phases["connect"] == pytest.approx(5.0, abs=slack)
    assert ready.readiness.phases["health"] == pytest.approx(4.0, abs=2 * slack)
    # Noticed within one poll interval of becoming ready, and confirmed by health_generate.
    assert 9.0 <= clock.now <= 9.0 + slack
    assert server.paths.count("/health_generate") == 1
    assert ready.model.id == "org/model"
    assert ready.version == "0.5.23"


def test_old_server_falls_back_to_health_generate_and_get_endpoints() -> None:
    clock = FakeClock()
    server = ScriptedServer(clock, ready_at=1.0, old=True)
    ready = gate(server, clock).wait()
    assert "/get_server_info" in server.paths
    assert "/get_model_info" in server.paths
    assert "/health_generate" in server.paths
    assert ready.server_info["tp_size"] == 8


def test_a_path_that_answers_405_moves_to_the_next_one() -> None:
    """A proxy that allows only some methods per path answers 405 where SGLang would 404."""
    clock = FakeClock()
    server = ScriptedServer(clock, old=True)

    def not_allowed(request: httpx.Request) -> httpx.Response:
        known = request.url.path in ("/ready", "/server_info", "/model_info")
        return httpx.Response(405) if known else server(request)

    ready = ReadinessGate(
        "default",
        "http://sglang.test",
        timeout=5.0,
        transport=httpx.MockTransport(not_allowed),
        clock=clock,
        sleep=clock.sleep,
    ).wait()
    assert ready.server_info["tp_size"] == 8
    assert clock.now < 1.0


def test_never_ready_fails_at_deadline_naming_phase_and_last_503() -> None:
    clock = FakeClock()
    server = ScriptedServer(clock, ready_at=float("inf"))
    with pytest.raises(ServerNotReady) as info:
        gate(server, clock, timeout=3.0, timeout_source="--sglang-ready-timeout").wait()
    message = str(info.value)
    assert info.value.phase == "health"
    assert "phase 'health' failed after 3.0" in message
    assert "ready timeout of 3s (from --sglang-ready-timeout)" in message
    assert "last response: GET /ready -> 503 with empty body" in message
    assert "phases passed: connect 0.00s" in message
    assert "still warming up" in message
    assert 3.0 <= clock.now < 3.1


def test_connection_refused_until_deadline() -> None:
    clock = FakeClock()
    server = ScriptedServer(clock, opens_at=float("inf"))
    with pytest.raises(ServerNotReady) as info:
        gate(server, clock, timeout=1.0).wait()
    assert info.value.phase == "connect"
    assert "ConnectError" in str(info.value)
    assert "phases passed: none" in str(info.value)


def test_schema_violation_names_the_json_path() -> None:
    clock = FakeClock()
    broken = json.loads(json.dumps(MODELS))
    broken["data"][0]["max_model_len"] = "131072"
    with pytest.raises(SchemaMismatch) as info:
        gate(ScriptedServer(clock, models=broken), clock).wait()
    assert info.value.json_path == "$.data[0].max_model_len"
    assert info.value.phase == "models"
    assert "at $.data[0].max_model_len: '131072' is not of type 'integer', 'null'" in str(
        info.value
    )


def test_wrong_max_model_len() -> None:
    clock = FakeClock()
    with pytest.raises(IdentityMismatch) as info:
        gate(ScriptedServer(clock), clock, expectations=[expect("max_model_len", 262144)]).wait()
    assert info.value.phase == "identity"
    assert (
        "max_model_len: expected 262144 (from --sglang-expect on the command line), "
        "/v1/models reports 131072 for 'org/model'"
    ) in str(info.value)


def test_wrong_model_id() -> None:
    clock = FakeClock()
    with pytest.raises(IdentityMismatch, match="serves 'org/model'"):
        gate(ScriptedServer(clock), clock, expectations=[expect("model_id", "other")]).wait()


def test_wrong_and_missing_server_info_values() -> None:
    clock = FakeClock()
    expectations = [
        expect("tp_size", 4),
        expect("no_such_key", 1),
        expect("speculative_algorithm", "eagle3"),
    ]
    with pytest.raises(IdentityMismatch) as info:
        gate(ScriptedServer(clock), clock, expectations=expectations).wait()
    message = str(info.value)
    assert info.value.phase == "server_info"
    assert (
        "tp_size: expected 4 (from --sglang-expect on the command line), /server_info reports 8"
        in message
    )
    assert "no_such_key: expected 1" in message and "has no such key" in message
    # SGLang upper-cases the algorithm: "eagle3" matches.
    assert "speculative_algorithm" not in message


def test_a_null_context_length_is_checked_against_the_served_max_model_len() -> None:
    # A real server reports context_length null unless given: the gate checks the effective
    # value, /v1/models' max_model_len, instead of saying it is not available.
    clock = FakeClock()
    server = ScriptedServer(clock, server_info={**SERVER_INFO, "context_length": None})
    ready = gate(server, clock, expectations=[expect("context_length", 131072)]).wait()
    assert ready.model.max_model_len == 131072
    with pytest.raises(IdentityMismatch) as info:
        gate(server, clock, expectations=[expect("context_length", 4096)]).wait()
    assert "the effective value is 131072 (/v1/models max_model_len)" in str(info.value)


def test_matching_expectations_pass() -> None:
    clock = FakeClock()
    ready = gate(
        ScriptedServer(clock),
        clock,
        expectations=[
            expect("tp_size", 8),
            expect("max_model_len", 131072),
            expect("model_id", "org/model"),
        ],
    ).wait()
    assert ready.model.max_model_len == 131072


def test_a_secret_that_is_part_of_the_model_name_leaves_the_model_alone() -> None:
    # Only /server_info is held redacted (its api_key): the model list is the server's identity.
    clock = FakeClock()
    card = {**MODELS["data"][0], "id": "tenant42/model", "root": "tenant42/model"}
    ready = gate(
        ScriptedServer(clock, models={**MODELS, "data": [card]}),
        clock,
        headers={"X-Route": "tenant42"},
        expectations=[expect("model_id", "tenant42/model")],
    ).wait()
    assert (ready.model.id, ready.model.root) == ("tenant42/model", "tenant42/model")


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_api_key_problems_are_explained(key: str | None) -> None:
    clock = FakeClock()
    with pytest.raises(ServerNotReady) as info:
        gate(ScriptedServer(clock, api_key="right"), clock, api_key=key).wait()
    assert info.value.phase == "models"
    assert "401 Unauthorized" in str(info.value)
    assert "--sglang-api-key" in str(info.value)
    assert "Bearer" not in str(info.value)
    assert "right" not in str(info.value)


def test_correct_api_key_passes_and_is_sent() -> None:
    clock = FakeClock()
    ready = gate(ScriptedServer(clock, api_key="k"), clock, api_key="k").wait()
    assert ready.headers == {"Authorization": "Bearer k"}


def test_body_that_is_not_json() -> None:
    clock = FakeClock()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, text="<html>proxy error</html>")
        return ScriptedServer(clock)(request)

    with pytest.raises(SchemaMismatch, match="not JSON"):
        ReadinessGate(
            "default",
            "http://x",
            timeout=5,
            transport=httpx.MockTransport(handler),
            clock=clock,
            sleep=clock.sleep,
        ).wait()


def test_ready_200_but_health_generate_503_keeps_waiting() -> None:
    # /ready reflects a flag; a server that cannot generate is not ready.
    clock = FakeClock()
    base = ScriptedServer(clock)

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/health_generate" and clock.now < 2.0:
            return httpx.Response(503)
        return base(request)

    ready = ReadinessGate(
        "default",
        "http://x",
        timeout=5,
        transport=httpx.MockTransport(handler),
        clock=clock,
        sleep=clock.sleep,
    ).wait()
    assert ready.readiness.phases["health"] >= 2.0


# -- issue 18: redirects, probe flooding, quick probes while a launch is watched -------------


def test_a_redirect_fails_at_once_naming_the_location() -> None:
    # An http -> https ingress answering 307: the gate waited out its whole ready timeout.
    clock = FakeClock()

    def ingress(request: httpx.Request) -> httpx.Response:
        location = f"https://sglang.example{request.url.path}"
        return httpx.Response(307, headers={"Location": location})

    with pytest.raises(ServerNotReady) as info:
        gate(ingress, clock, timeout=600.0).wait()  # type: ignore[arg-type]
    assert clock.now < 1.0
    message = str(info.value)
    assert info.value.phase == "health"
    assert "GET /ready answered 307 redirecting to https://sglang.example/ready" in message
    assert "give the URL the server answers at itself" in message


def test_ready_is_polled_fast_and_health_generate_with_back_off() -> None:
    # /ready runs no generation: readiness is seen within one short interval, and its polls
    # back off to that interval (not one every 20 ms through a minutes-long warm-up).
    clock = FakeClock()
    server = ScriptedServer(clock, ready_at=60.0)
    ready = gate(server, clock, timeout=120.0).wait()
    assert ready.readiness.phases["health"] == pytest.approx(60.0, abs=MAX_CHEAP_POLL_INTERVAL)
    assert server.paths.count("/ready") <= 60.0 / MAX_CHEAP_POLL_INTERVAL + 20
    # /health_generate runs one (the only probe of releases without /ready): backed off.
    clock = FakeClock()
    old = ScriptedServer(clock, ready_at=60.0, old=True)
    gate(old, clock, timeout=120.0).wait()
    polls = old.paths.count("/health_generate")
    assert 60.0 / MAX_POLL_INTERVAL <= polls <= 60.0 / MAX_POLL_INTERVAL + 20, polls


def test_a_launch_gate_is_woken_by_the_ready_line_and_backs_off_meanwhile() -> None:
    # Launch mode: the log's ready line ends the wait at once; meanwhile the probes back off
    # (each is a line in the server's log, kept as a CI artifact).
    clock = FakeClock()
    server = ScriptedServer(clock, ready_at=60.0)

    def until_ready_line(seconds: float) -> None:
        clock.now = 60.0 if clock.now < 60.0 <= clock.now + seconds else clock.now + seconds

    ready = gate(server, clock, timeout=120.0, ready_line=until_ready_line).wait()
    assert ready.readiness.phases["health"] == pytest.approx(60.0, abs=1e-6)
    polls = server.paths.count("/ready")
    assert polls <= 60.0 / MAX_POLL_INTERVAL + 20, polls


def test_a_watched_probe_before_the_first_answer_is_quick() -> None:
    # Somebody else's listener holds the port and never answers; our server died. The
    # watch (between probes) must run within seconds, not after a 30 s probe.
    clock = FakeClock()
    timeouts: list[float] = []

    def silent(request: httpx.Request) -> httpx.Response:
        timeout = request.extensions["timeout"]["read"]
        timeouts.append(timeout)
        clock.now += timeout
        raise httpx.ReadTimeout("no answer", request=request)

    def watch(phase: str, elapsed: float) -> None:
        if elapsed > 2.0:
            raise ServerNotReady("the process exited", phase=phase)

    with pytest.raises(ServerNotReady, match="the process exited"):
        gate(silent, clock, timeout=600.0, watch=watch).wait()  # type: ignore[arg-type]
    assert timeouts and max(timeouts) <= QUICK_PROBE_TIMEOUT
    assert clock.now < 5.0


def test_failure_messages_are_redacted() -> None:
    clock = FakeClock()
    server = ScriptedServer(clock, models={"bad": "api_key='sk-leak-77'"})
    with pytest.raises(SchemaMismatch) as info:
        gate(server, clock, api_key="sk-leak-77").wait()
    assert "sk-leak-77" not in str(info.value)


def test_a_body_over_the_size_limit_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 24: every body read is bounded; a server sending too much will not send less.
    import pytest_sglang.server.probing as probing

    monkeypatch.setattr(probing, "MAX_BODY_BYTES", 1000)
    clock = FakeClock()
    models = {**MODELS, "padding": "x" * 2000}
    with pytest.raises(ServerNotReady, match="GET /v1/models returned a body of more than 1000"):
        gate(ScriptedServer(clock, models=models), clock).wait()
    assert clock.now < 1.0


def test_the_gate_runs_from_a_thread_that_runs_an_event_loop() -> None:
    # An async test asking for a server: the gate's own loop cannot run on the caller's.
    import asyncio

    clock = FakeClock()

    async def caller() -> str:
        return gate(ScriptedServer(clock), clock).wait().model.id

    assert asyncio.run(caller()) == "org/model"


@pytest.mark.parametrize("answer", ["400", "dropped"])
def test_http_to_a_tls_port_fails_at_once(answer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 24: nginx answers a plain request on its HTTPS port with 400, a bare TLS server
    # drops it; one TLS handshake (here: stubbed) settles which scheme the port speaks.
    clock = FakeClock()
    handshakes: list[tuple[str, int]] = []

    def speaks_tls(self: Prober, host: str, port: int, limit: float) -> bool:
        handshakes.append((host, port))
        return True

    def nginx(request: httpx.Request) -> httpx.Response:
        if answer == "dropped":
            raise httpx.RemoteProtocolError("Server disconnected", request=request)
        return httpx.Response(400, text="The plain HTTP request was sent to HTTPS port")

    monkeypatch.setattr(Prober, "speaks_tls", speaks_tls)
    with pytest.raises(ServerNotReady, match=r"speaks TLS \(HTTPS\), not plain HTTP; use https://"):
        ReadinessGate(
            "default",
            "http://gpu:8443",
            timeout=60,
            transport=httpx.MockTransport(nginx),
            clock=clock,
            sleep=clock.sleep,
        ).wait()
    assert handshakes == [("gpu", 8443)]
    assert clock.now < 1.0


@pytest.fixture
def ctrl_c() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt here, however the suite was started (issue 18)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class CtrlCInAFinalizer:
    """Ctrl-C arrives while a finalizer runs: Python drops its KeyboardInterrupt.

    As after every ``asyncio.Runner.run``, where asyncio's task registry runs a weakref
    callback: under load the signal lands there now and then.
    """

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.usefixtures("ctrl_c")
def test_a_ctrl_c_dropped_in_a_finalizer_still_stops_the_gate() -> None:
    clock = FakeClock()
    server = ScriptedServer(clock, ready_at=1e9)

    def ready_line(seconds: float) -> bool:  # the launcher's wait between probes
        clock.sleep(seconds)
        if len(server.paths) == 3:
            CtrlCInAFinalizer()
        return False

    with pytest.raises(KeyboardInterrupt):
        gate(server, clock, ready_line=ready_line).wait()
    assert len(server.paths) == 3  # not one probe after it


@pytest.mark.usefixtures("ctrl_c")
def test_a_ctrl_c_as_a_failing_probe_ends_still_stops_the_gate() -> None:
    # asyncio.Runner.run cancels its task on SIGINT and raises KeyboardInterrupt when the
    # task ends cancelled; a task that ends with its own exception drops the interrupt.
    clock = FakeClock()
    server = ScriptedServer(clock, opens_at=1e9)

    def refuse(request: httpx.Request) -> httpx.Response:
        if len(server.paths) == 2:
            signal.raise_signal(signal.SIGINT)
        return server(request)

    probes = ReadinessGate(
        "default",
        "http://sglang.test",
        timeout=60.0,
        transport=httpx.MockTransport(refuse),
        clock=clock,
        sleep=clock.sleep,
    )
    with pytest.raises(KeyboardInterrupt):
        probes.wait()
    assert len(server.paths) == 3


@pytest.mark.usefixtures("ctrl_c")
def test_a_ctrl_c_beats_the_error_that_ends_the_gate() -> None:
    # The probe that the interrupt cut ends the gate with another error (here a bug; also
    # asyncio's CancelledError when SIGINT lands as Runner.run starts): still interrupted.
    def broken(request: httpx.Request) -> httpx.Response:
        signal.raise_signal(signal.SIGINT)
        raise RuntimeError("a bug in a transport")

    probes = ReadinessGate(
        "default", "http://sglang.test", timeout=60.0, transport=httpx.MockTransport(broken)
    )
    with pytest.raises(KeyboardInterrupt) as caught:
        probes.wait()
    assert isinstance(caught.value.__context__, RuntimeError)


def test_an_ignored_ctrl_c_stays_ignored_while_the_gate_waits() -> None:
    # `nohup pytest`, `pytest &` in a script: SIGINT is not meant for this process.
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        clock = FakeClock()
        server = ScriptedServer(clock, ready_at=0.3)
        seen: list[object] = []

        def wait(seconds: float) -> None:
            seen.append(signal.getsignal(signal.SIGINT))
            signal.raise_signal(signal.SIGINT)
            clock.sleep(seconds)

        ready = ReadinessGate(
            "default",
            "http://sglang.test",
            timeout=60.0,
            transport=httpx.MockTransport(server),
            clock=clock,
            sleep=wait,
        ).wait()
        assert ready.model.id == "org/model"
        assert seen and all(handler == signal.SIG_IGN for handler in seen)
    finally:
        signal.signal(signal.SIGINT, previous)
