from __future__ import annotations

import json

from pytest_sglang.loadgen.prompts import (
    UNIVERSAL_TOKEN_IDS,
    WORDS,
    chat_text,
    encoded_bodies,
    request_body,
    token_ids,
)
from pytest_sglang.loadgen.workload import Workload

W = Workload(input_len=100, output_len=32, temperature=0.0)


def test_token_prompts_have_exact_length_and_safe_ids() -> None:
    ids = token_ids(W, "s", 0)
    assert len(ids) == 100
    assert all(i in UNIVERSAL_TOKEN_IDS for i in ids)


def test_prompts_are_deterministic_and_differ_per_request_salt_and_seed() -> None:
    assert token_ids(W, "s", 3) == token_ids(W, "s", 3)
    firsts = {token_ids(W, "s", i)[0] for i in range(50)}
    assert len(firsts) > 45  # no shared prefix for the radix cache to reuse
    assert token_ids(W, "s", 0) != token_ids(W, "t", 0)
    other_seed = Workload(input_len=100, output_len=32, seed=1)
    assert token_ids(W, "s", 0) != token_ids(other_seed, "s", 0)


def test_pinned_prompt() -> None:
    # String seeds are hashed with SHA-512: the same prompt on every machine and version,
    # so measurements cached under a workload's key stay comparable.
    w = Workload(input_len=5, output_len=1, seed=42)
    # Vocabulary unknown: ids every tokenizer has (16-255); known: [1000, 30000) (issue 12).
    assert token_ids(w, "x", 0) == [177, 115, 195, 182, 171]
    sized = Workload(input_len=5, output_len=1, seed=42, vocab_size=128256)
    assert token_ids(sized, "x", 0) == [20490, 12997, 22707, 21100, 19815]
    assert chat_text(w, "x", 0) == "would they first other their"


def test_chat_text_is_input_len_single_token_words() -> None:
    text = chat_text(W, "s", 0)
    words = text.split(" ")
    assert len(words) == 100 and set(words) <= set(WORDS)
    assert chat_text(W, "s", 0) != chat_text(W, "s", 1)


def test_generate_body() -> None:
    w = Workload(
        input_len=4,
        output_len=8,
        temperature=0.7,
        extra={"sampling_params": {"top_k": 1}, "rid": "x"},
    )
    body = request_body(w, "s", 0)
    assert body == {
        "input_ids": token_ids(w, "s", 0),
        "sampling_params": {
            "max_new_tokens": 8,
            "ignore_eos": True,
            "temperature": 0.7,
            "top_k": 1,
        },
        "stream": True,
        "rid": "x",
    }


def test_completions_body_streams_with_usage() -> None:
    w = Workload(input_len=4, output_len=8, endpoint="completions")
    body = request_body(w, "s", 0, model="served/name")
    assert body == {
        "model": "served/name",
        "prompt": token_ids(w, "s", 0),
        "max_tokens": 8,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


def test_chat_body_and_extra_stream_options() -> None:
    w = Workload(
        input_len=4,
        output_len=8,
        endpoint="chat",
        extra={"stream_options": {"continuous_usage_stats": False}, "top_k": 1},
    )
    body = request_body(w, "s", 0)
    assert body["messages"] == [{"role": "user", "content": chat_text(w, "s", 0)}]
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": False}
    assert body["top_k"] == 1 and body["max_tokens"] == 8 and body["ignore_eos"] is True


def test_non_streamed_body_has_no_stream_options() -> None:
    w = Workload(input_len=4, output_len=8, endpoint="completions", stream=False)
    body = request_body(w, "s", 0)
    assert body["stream"] is False and "stream_options" not in body


def test_encoded_bodies_are_json() -> None:
    bodies = encoded_bodies(W, "s", 3)
    assert [json.loads(b) for b in bodies] == [request_body(W, "s", i) for i in range(3)]
