"""A negative token count in a ``usage`` or ``meta_info`` fails the request (issue 13)."""

from __future__ import annotations

import json

import pytest

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser
from tests.loadgen.test_stream_shapes import chat, completion, frames, parse, usage


def test_a_negative_final_usage_fails_the_completions_stream() -> None:
    body = frames(completion(" a"), completion("", "length", usage(-8)), "[DONE]")
    rec = parse("completions", body)
    assert rec.error is not None
    assert rec.error.startswith(
        "the server reported a negative token count (usage.completion_tokens -8)"
    )
    assert rec.output_tokens_server is None  # never stored


def test_a_negative_prompt_count_in_a_usage_chunk_fails_the_chat_stream() -> None:
    last = {"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": usage(1, -3)}
    body = frames(chat({"content": " a"}), chat({}, "length"), last, "[DONE]")
    rec = parse("chat", body)
    assert rec.error is not None and "(usage.prompt_tokens -3)" in rec.error


def test_a_negative_running_count_fails_the_stream() -> None:
    body = frames(completion(" a", usage=usage(-1)), completion("", "length"), "[DONE]")
    rec = parse("completions", body)
    assert rec.error is not None and "(usage.completion_tokens -1)" in rec.error
    assert sum(rec.chunk_tokens) == 0


def test_a_negative_native_count_fails_the_stream() -> None:
    event = {"text": "a", "output_ids": [5], "meta_info": {"completion_tokens": -2,
             "prompt_tokens": 7, "finish_reason": {"type": "length"}}}  # fmt: skip
    rec = parse("generate", frames(event, "[DONE]"))
    assert rec.error is not None and "(meta_info.completion_tokens -2)" in rec.error


@pytest.mark.parametrize(
    ("endpoint", "body"),
    [
        ("completions", {"choices": [{"text": "a", "finish_reason": "length"}],
                         "usage": usage(-4)}),
        ("generate", {"text": "a", "meta_info": {"completion_tokens": 4, "prompt_tokens": -1,
                                                 "finish_reason": {"type": "length"}}}),
    ],
)  # fmt: skip
def test_a_negative_count_fails_a_whole_response(endpoint: str, body: dict[str, object]) -> None:
    rec = RequestRecord(index=0, warmup=False, input_len=7, output_len=4)
    StreamParser(endpoint, rec).whole(json.dumps(body).encode())
    assert rec.error is not None and "negative token count" in rec.error


def test_zero_is_a_count() -> None:
    body = frames(completion("", "length", usage(0)), "[DONE]")
    rec = parse("completions", body)
    assert rec.error is None and rec.output_tokens_server == 0
