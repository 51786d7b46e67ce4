"""The gate of servers declared OpenAI-compatible, the endpoints every message names, and the
engines it recognises when it refuses a server as not SGLang (issue 13)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from pytest_sglang.config.values import Expectation
from pytest_sglang.errors import SchemaMismatch, ServerNotReady
from pytest_sglang.server.engines import recognise
from pytest_sglang.server.readiness import ReadinessGate
from tests.fake_clock import FakeClock

SECRET = "sk-header-secret-1234"


class Engine:
    """An OpenAI-compatible server: /health (optional), /v1/models, and nothing of SGLang's."""

    def __init__(
        self,
        clock: FakeClock,
        *,
        models: Any = None,
        health: bool = True,
        ready_at: float = 0.0,
        server: str | None = None,
        owned_by: str = "vllm",
        require: dict[str, str] | None = None,
    ) -> None:
        self.clock = clock
        self.models = (
            models
            if models is not None
            else {
                "object": "list",
                "data": [
                    {"id": "org/model", "object": "model", "created": 1, "owned_by": owned_by}
                ],
            }
        )
        self.health = health
        self.ready_at = ready_at
        self.server = server
        self.require = require or {}
        self.paths: list[str] = []
        self.seen_headers: list[httpx.Headers] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        self.seen_headers.append(request.headers)
        headers = {"server": self.server} if self.server else {}
        for name, value in self.require.items():
            if request.headers.get(name) != value:
                return httpx.Response(401, json={"error": "unauthorized"}, headers=headers)
        warming = self.clock.now < self.ready_at
        if request.url.path == "/health" and self.health:
            return httpx.Response(503 if warming else 200, headers=headers)
        if request.url.path == "/v1/models":
            if warming and not self.health:
                return httpx.Response(503, headers=headers)
            return httpx.Response(200, json=self.models, headers=headers)
        return httpx.Response(404, json={"detail": "Not Found"}, headers=headers)


def gate(engine: Engine, clock: FakeClock, **kwargs: Any) -> ReadinessGate:
    kwargs.setdefault("timeout", 60.0)
    return ReadinessGate(
        "vllm", "http://engine.test", transport=httpx.MockTransport(engine), clock=clock,
        sleep=clock.sleep, **kwargs,
    )  # fmt: skip


# -- declared OpenAI-compatible -------------------------------------------------------------


def test_an_openai_server_passes_on_health_and_its_model_list() -> None:
    clock = FakeClock()
    engine = Engine(clock, ready_at=3.0)
    server = gate(engine, clock, kind="openai").wait()
    assert server.kind == "openai"
    assert list(server.readiness.phases) == ["connect", "health", "models", "identity"]
    assert "SGLang only" in server.readiness.skipped["server_info"]
    assert server.readiness.as_dict()["skipped"] == server.readiness.skipped
    assert server.server_info == {} and server.model.id == "org/model"
    assert server.model.max_model_len is None  # not SGLang's addition: not required
    assert set(server.not_applicable) >= {"server_info", "server_counters"}
    # None of SGLang's endpoints was asked.
    assert set(engine.paths) == {"/health", "/v1/models"}
    assert clock.now >= 3.0


def test_without_health_the_model_list_is_the_readiness_signal() -> None:
    clock = FakeClock()
    engine = Engine(clock, health=False, ready_at=2.0)
    server = gate(engine, clock, kind="openai").wait()
    assert engine.paths[0] == "/health" and "/v1/models" in engine.paths
    assert clock.now >= 2.0 and server.model.id == "org/model"


def test_the_openai_model_list_is_validated_with_every_violation() -> None:
    clock = FakeClock()
    models = {"object": "list", "data": [{"id": "", "created": "yesterday"}]}
    with pytest.raises(SchemaMismatch) as info:
        gate(Engine(clock, models=models), clock, kind="openai").wait()
    message = str(info.value)
    assert "breaks the model-list schema: 2 violations of openai_models.schema.json:" in message
    assert "at $.data[0].id" in message and "at $.data[0].created" in message
    assert "    in: {" in message  # the JSON around each violation


def test_model_expectations_hold_and_server_info_ones_are_reported_unchecked() -> None:
    clock = FakeClock()
    expectations = (
        Expectation("model_id", "org/model", "cli"),
        Expectation("tp_size", 8, "cli"),
    )
    server = gate(Engine(clock), clock, kind="openai", expectations=expectations).wait()
    assert "expectations not checked here: tp_size=8" in server.readiness.skipped["server_info"]


def test_headers_reach_every_probe_and_never_a_message() -> None:
    clock = FakeClock()
    engine = Engine(clock, require={"x-api-key": SECRET})
    server = gate(engine, clock, kind="openai", headers={"X-Api-Key": SECRET}).wait()
    assert all(h.get("x-api-key") == SECRET for h in engine.seen_headers)
    assert server.headers == {"X-Api-Key": SECRET}
    assert SECRET not in repr(server)
    # A wrong one: 401, and the message does not quote it.
    with pytest.raises(ServerNotReady) as info:
        gate(Engine(clock, require={"x-api-key": "other"}), clock, kind="openai",
             headers={"X-Api-Key": SECRET}).wait()  # fmt: skip
    assert "401" in str(info.value) and SECRET not in str(info.value)


def test_neither_health_nor_models_is_not_an_openai_server() -> None:
    clock = FakeClock()

    def nothing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404)

    with pytest.raises(ServerNotReady) as info:
        ReadinessGate("x", "http://engine.test/v1", timeout=5, kind="openai",
                      transport=httpx.MockTransport(nothing), clock=clock,
                      sleep=clock.sleep).wait()  # fmt: skip
    message = str(info.value)
    assert message.startswith("OpenAI-compatible server 'x' at http://engine.test/v1")
    assert "neither /health nor /v1/models exists (404)" in message
    assert "endpoints tried in phase 'health': GET /health -> 404, GET /v1/models -> 404" in message


# -- an SGLang gate that meets another engine ------------------------------------------------


@pytest.mark.parametrize(
    ("server", "owned_by", "engine"),
    [
        (None, "vllm", "vLLM"),
        ("llama.cpp", "llamacpp", "llama.cpp (llama-server)"),
        (None, "tensorrt_llm", "TensorRT-LLM (trtllm-serve)"),
        (None, "library", "Ollama"),
    ],
)
def test_a_refused_engine_is_named_with_what_to_do(
    server: str | None, owned_by: str, engine: str
) -> None:
    clock = FakeClock()
    with pytest.raises(ServerNotReady) as info:
        gate(Engine(clock, server=server, owned_by=owned_by), clock).wait()
    message = str(info.value)
    assert "GET /health_generate answered 404: this is not an SGLang server" in message
    assert f"this looks like {engine}: its " in message
    assert "fix: to measure it against SGLang servers, declare it as a plain OpenAI-" in message
    assert "--sglang-url vllm=openai+http://engine.test" in message
    # Every endpoint the health phase tried.
    assert "endpoints tried in phase 'health': GET /ready -> 404, GET /health_generate -> 404" in (
        message
    )


def test_server_info_404_names_both_endpoints_tried() -> None:
    clock = FakeClock()

    def half_sglang(request: httpx.Request) -> httpx.Response:
        if request.url.path in ("/ready", "/health_generate"):
            return httpx.Response(200)
        if request.url.path == "/v1/models":
            card = {"id": "m", "object": "model", "created": 1, "owned_by": "sglang",
                    "root": "m", "max_model_len": 8}  # fmt: skip
            return httpx.Response(200, json={"object": "list", "data": [card]})
        return httpx.Response(404)

    with pytest.raises(ServerNotReady) as info:
        ReadinessGate("p", "http://proxy.test", timeout=5, transport=httpx.MockTransport(
            half_sglang), clock=clock, sleep=clock.sleep).wait()  # fmt: skip
    message = str(info.value)
    assert "GET /server_info and /get_server_info answered 404" in message
    assert (
        "endpoints tried in phase 'server_info': GET /server_info -> 404, "
        "GET /get_server_info -> 404" in message
    )


@pytest.mark.parametrize(
    ("header", "models", "engine"),
    [
        ("llama.cpp", None, "llama.cpp (llama-server)"),
        (None, {"data": [{"id": "m", "owned_by": "vllm"}]}, "vLLM"),
        (None, {"data": [{"id": "m", "owned_by": "Triton Inference Server"}]},
         "Triton Inference Server (OpenAI frontend)"),
        (None, {"data": [{"id": "org/m", "owned_by": "org/m"}]},
         "Text Generation Inference (TGI)"),
    ],
)  # fmt: skip
def test_recognise(header: str | None, models: object, engine: str) -> None:
    found = recognise(header, models)
    assert found is not None and found[0] == engine


@pytest.mark.parametrize(
    ("header", "models"),
    [
        ("uvicorn", {"data": [{"id": "m", "owned_by": "sglang"}]}),  # SGLang itself
        (None, {"data": [{"id": "m", "owned_by": "openai"}]}),
        (None, "not json"),
        (None, {"data": []}),
    ],
)
def test_recognise_nothing_it_does_not_know(header: str | None, models: object) -> None:
    assert recognise(header, models) is None
