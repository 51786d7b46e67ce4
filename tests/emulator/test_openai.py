"""``/v1/completions`` and ``/v1/chat/completions``: SGLang's shapes, and the official client."""

from __future__ import annotations

import re
from typing import Any

import openai
import pytest

from pytest_sglang.testing import EmulatorProcess
from tests.emulator.conftest import MODEL, client, sse_json

USAGE_KEYS = [
    "prompt_tokens",
    "total_tokens",
    "completion_tokens",
    "prompt_tokens_details",
    "reasoning_tokens",
    "completion_tokens_details",
]


def post(emulator: EmulatorProcess, path: str, body: dict[str, Any]) -> dict[str, Any]:
    with client(emulator) as http:
        response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def stream(emulator: EmulatorProcess, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    with client(emulator) as http, http.stream("POST", path, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        return sse_json(r)


def test_completion(emulator: EmulatorProcess) -> None:
    body = post(
        emulator, "/v1/completions", {"model": "anything", "prompt": "Say hi", "ignore_eos": True}
    )
    assert re.fullmatch(r"[0-9a-f]{32}", body["id"])
    assert body["object"] == "text_completion"
    assert body["model"] == "anything"  # echoed, not validated
    (choice,) = body["choices"]
    assert choice == {
        "index": 0,
        "text": choice["text"],
        "logprobs": None,
        "finish_reason": "length",
        "matched_stop": None,
    }
    assert len(choice["text"].split()) == 16  # max_tokens defaults to 16
    assert list(body["usage"]) == USAGE_KEYS
    assert body["usage"]["prompt_tokens"] == 2
    assert body["usage"]["completion_tokens"] == 16
    assert body["usage"]["total_tokens"] == 18
    assert body["usage"]["reasoning_tokens"] == 0
    assert body["metadata"] == {
        "weight_version": "default",
        "weight_versions": [{"version": "default", "start": 0, "end": 16}],
    }


def test_completion_model_defaults_to_default(emulator: EmulatorProcess) -> None:
    body = post(emulator, "/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2})
    assert body["model"] == "default"
    assert body["usage"]["prompt_tokens"] == 3


def test_completion_with_several_prompts_and_choices(emulator: EmulatorProcess) -> None:
    body = post(
        emulator,
        "/v1/completions",
        {"prompt": ["a b", "c"], "n": 2, "max_tokens": 3, "ignore_eos": True},
    )
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    # Prompts count once per prompt, completions once per choice.
    assert body["usage"]["prompt_tokens"] == 3
    assert body["usage"]["completion_tokens"] == 12


def test_completion_stream_without_usage(emulator: EmulatorProcess) -> None:
    events = stream(
        emulator, "/v1/completions", {"prompt": "x", "max_tokens": 4, "ignore_eos": True}
    )
    assert len(events) == 4
    for event in events:
        assert list(event) == ["id", "object", "created", "model", "choices", "usage"]
        assert event["usage"] is None
    assert [e["choices"][0]["finish_reason"] for e in events] == [None, None, None, "length"]
    assert "".join(e["choices"][0]["text"] for e in events).count(" ") == 4


def test_completion_stream_with_usage_drops_nulls(emulator: EmulatorProcess) -> None:
    events = stream(
        emulator,
        "/v1/completions",
        {
            "prompt": "x",
            "max_tokens": 3,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    usage = events[-1]
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 1,
        "total_tokens": 4,
        "completion_tokens": 3,
        "reasoning_tokens": 0,
    }
    assert all(e["choices"] for e in events[:-1])


def test_chat_completion(emulator: EmulatorProcess) -> None:
    body = post(
        emulator,
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hello there"}],
            "max_tokens": 5,
            "ignore_eos": True,
        },
    )
    assert body["object"] == "chat.completion"
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["reasoning_content"] is None
    assert len(choice["message"]["content"].split()) == 5
    assert choice["finish_reason"] == "length" and choice["matched_stop"] is None
    assert list(body["usage"]) == USAGE_KEYS


def test_chat_stops_by_itself_with_matched_stop(emulator: EmulatorProcess) -> None:
    body = post(
        emulator,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]},
    )
    (choice,) = body["choices"]
    assert choice["finish_reason"] == "stop"
    assert choice["matched_stop"] == 128009


def test_chat_stream_shape(emulator: EmulatorProcess) -> None:
    events = stream(
        emulator,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 3,
            "ignore_eos": True,
            "stream_options": {"include_usage": True},
        },
    )
    first, *content, finish, usage = events
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {
        "reasoning_content": None,
        "role": "assistant",
        "content": "",
    }
    assert "usage" not in first
    assert len(content) == 3
    for event in content:
        delta = event["choices"][0]["delta"]
        assert list(delta) == ["reasoning_content", "content"]
        assert event["choices"][0]["finish_reason"] is None
    assert finish["choices"][0]["delta"] == {"reasoning_content": None}
    assert finish["choices"][0]["finish_reason"] == "length"
    assert usage["choices"] == []
    assert list(usage["usage"]) == USAGE_KEYS  # chat keeps the null fields
    assert usage["usage"]["completion_tokens"] == 3
    assert len({e["id"] for e in events}) == 1


def test_chat_stream_without_usage_has_no_usage_chunk(emulator: EmulatorProcess) -> None:
    events = stream(
        emulator,
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "ignore_eos": True},
    )
    assert all(e["choices"] for e in events)
    assert all("usage" not in e for e in events)


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_non_json_content_type_is_400(emulator: EmulatorProcess, path: str) -> None:
    with client(emulator) as http:
        response = http.post(path, content=b"prompt=x", headers={"content-type": "text/plain"})
    assert response.status_code == 400
    body = response.json()
    assert list(body) == ["object", "message", "type", "param", "code"]
    assert body["object"] == "error" and body["code"] == 400 and body["param"] is None
    assert "application/json" in body["message"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/completions", {"model": "x"}, "prompt"),
        ("/v1/chat/completions", {"model": "x"}, "messages"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, "max_tokens"),
    ],
)
def test_validation_errors_are_400_not_422(
    emulator: EmulatorProcess, path: str, body: dict[str, Any], field: str
) -> None:
    with client(emulator) as http:
        response = http.post(path, json=body)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "Bad Request"
    assert field in error["message"]


def test_over_long_prompt_is_a_400_envelope(emulator: EmulatorProcess) -> None:
    with client(emulator) as http:
        response = http.post("/v1/completions", json={"prompt": [1] * 2040, "max_tokens": 16})
    assert response.status_code == 400
    error = response.json()
    assert error["object"] == "error" and error["type"] == "BadRequest"
    assert "maximum context length of 2048 tokens" in error["message"]


def test_openai_client_lists_models(emulator: EmulatorProcess) -> None:
    with openai.OpenAI(base_url=f"{emulator.url}/v1", api_key="unused", max_retries=0) as oai:
        models = list(oai.models.list())
    assert [m.id for m in models] == [MODEL]
    assert models[0].owned_by == "sglang"


def test_openai_client_streams_chat_with_usage(emulator: EmulatorProcess) -> None:
    with openai.OpenAI(base_url=f"{emulator.url}/v1", api_key="unused", max_retries=0) as oai:
        chunks = list(
            oai.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": "Tell me about Paris"}],
                max_tokens=7,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            )
        )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    usage = chunks[-1].usage
    assert len(text.split()) == 7
    assert finish == ["length"]
    assert usage is not None and usage.completion_tokens == 7
    assert usage.total_tokens == usage.prompt_tokens + 7


def test_openai_client_completion(emulator: EmulatorProcess) -> None:
    with openai.OpenAI(base_url=f"{emulator.url}/v1", api_key="unused", max_retries=0) as oai:
        completion = oai.completions.create(model=MODEL, prompt="Hi", max_tokens=3)
    assert completion.usage is not None and completion.usage.completion_tokens == 3
    assert completion.choices[0].finish_reason == "length"
