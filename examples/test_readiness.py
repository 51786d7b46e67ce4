"""Readiness and identity of a served model: the first thing every acceptance suite checks.

Runs unchanged against a real SGLang server (``pytest examples --sglang-url=http://HOST:PORT``)
and against the emulator (``pytest examples --sglang-launcher=emulator``). State what the server
must be with ``--sglang-expect``, e.g. ``--sglang-expect max_model_len=262144
--sglang-expect tp_size=8``: the readiness gate checks it before any test runs.
"""

from __future__ import annotations

import httpx

from pytest_sglang import SGLangServer


def test_gate_passed_every_phase(sglang_server: SGLangServer) -> None:
    # The fixture only returns once health, schema, identity and server info all passed.
    assert list(sglang_server.readiness.phases) == [
        "connect",
        "health",
        "models",
        "identity",
        "server_info",
    ]
    assert sglang_server.version, "server info carries SGLang's version"


def test_served_model_is_the_configured_one(sglang_server: SGLangServer) -> None:
    info = sglang_server.server_info
    served_name = info.get("served_model_name") or info["model_path"]
    assert sglang_server.model.id == served_name
    assert sglang_server.model.max_model_len is not None
    assert sglang_server.model.max_model_len > 0


def test_health_generate_is_200(sglang_client: httpx.Client) -> None:
    assert sglang_client.get("/health_generate").status_code == 200


def test_generates_exactly_the_requested_tokens(sglang_client: httpx.Client) -> None:
    response = sglang_client.post(
        "/generate",
        json={
            "input_ids": [1, 2, 3, 4, 5, 6, 7, 8],
            "sampling_params": {"max_new_tokens": 16, "ignore_eos": True, "temperature": 0},
        },
    )
    assert response.status_code == 200, response.text
    meta = response.json()["meta_info"]
    assert meta["completion_tokens"] == 16
    assert meta["prompt_tokens"] == 8
    assert meta["finish_reason"]["type"] == "length"


def test_chat_completion_answers(sglang_client: httpx.Client, sglang_server: SGLangServer) -> None:
    response = sglang_client.post(
        "/v1/chat/completions",
        json={
            "model": sglang_server.model.id,
            "messages": [{"role": "user", "content": "Say hello."}],
            "max_completion_tokens": 8,
            "ignore_eos": True,
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["message"]["content"]
    assert body["usage"]["completion_tokens"] == 8
