"""The stream parsers on every shape of stream servers send, recorded or reproduced byte-exact.

``streams_recorded/`` holds streams captured from a real SGLang 0.5.23 server (CPU build,
tiny model): the native ``/generate`` stream (cumulative text and ids, final meta_info) and a
chat stream (role chunk, content deltas, text-less finish chunk, ``choices: []`` usage chunk).
The other shapes are those of other OpenAI-compatible servers: usage on the finish chunk and
no usage chunk (llama.cpp), no usage at all, and running usage on every chunk.
Every stream is also fed in 7-byte reads, as a network may cut it anywhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import StreamParser

RECORDED = Path(__file__).parent / "streams_recorded"


def frames(*events: dict[str, Any] | str) -> bytes:
    out = b""
    for event in events:
        payload = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
        out += f"data: {payload}\n\n".encode()
    return out


def parse(endpoint: str, body: bytes, read: int | None = None) -> RequestRecord:
    """Feed ``body`` in ``read``-byte pieces (one piece when ``None``), 1 s apart."""
    rec = RequestRecord(index=0, warmup=False, input_len=7, output_len=6)
    parser = StreamParser(endpoint, rec)
    pieces = [body] if read is None else [body[i : i + read] for i in range(0, len(body), read)]
    for i, piece in enumerate(pieces):
        parser.feed(piece, 1.0 + i)
    parser.finish(len(pieces) + 1.0)
    return rec


@pytest.mark.parametrize("read", [None, 7])
def test_sglang_0_5_23_native_stream(read: int | None) -> None:
    rec = parse("generate", (RECORDED / "sglang-0.5.23-generate.sse").read_bytes(), read)
    assert rec.error is None
    assert rec.output_tokens_server == 6 and rec.output_tokens_client == 6
    assert sum(rec.chunk_tokens) == 6 and rec.chunk_tokens_exact
    assert rec.prompt_tokens == 3
    assert rec.finish_reason == "length"


@pytest.mark.parametrize("read", [None, 7])
def test_sglang_0_5_23_chat_stream(read: int | None) -> None:
    rec = parse("chat", (RECORDED / "sglang-0.5.23-chat.sse").read_bytes(), read)
    assert rec.error is None
    # Role chunk, four content deltas, a text-less finish chunk, the usage chunk.
    assert rec.chunk_tokens == [1, 1, 1, 1] and rec.chunk_tokens_exact
    assert rec.output_tokens_server == 4
    assert rec.prompt_tokens == 7
    assert rec.finish_reason == "length"


def completion(
    text: str, finish: str | None = None, usage: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1796285142,
        "model": "m",
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish}],
        **extra,
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def chat(
    delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1796285142,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        chunk["usage"] = usage
    return chunk


def usage(completion_tokens: int, prompt_tokens: int = 7) -> dict[str, int]:
    return {
        "completion_tokens": completion_tokens,
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


WORDS = [" a", " b", " c", " d", " e", " f"]
LLAMA_TIMINGS = {"prompt_n": 7, "predicted_n": 6, "predicted_ms": 61.2, "prompt_ms": 4.1}


@pytest.mark.parametrize("read", [None, 7])
def test_completions_usage_on_the_finish_chunk_llama_cpp_style(read: int | None) -> None:
    # llama.cpp: one chunk per token, then a finish chunk with empty text, the final usage and
    # its own timings, and no `choices: []` usage chunk. The usage is the final count, not a
    # 6-token chunk (which made ITL p50 0.003 ms and throughput 0.0 tok/s).
    body = frames(
        *(completion(w) for w in WORDS),
        completion("", "length", usage(6), timings=LLAMA_TIMINGS),
        "[DONE]",
    )
    rec = parse("completions", body, read)
    assert rec.error is None
    assert sum(rec.chunk_tokens) == 6 and len(rec.chunk_tokens) == 6
    assert rec.chunk_tokens_exact  # 6 chunks with text, 6 tokens: one each
    assert rec.output_tokens_server == 6 and rec.output_tokens == 6
    assert rec.prompt_tokens == 7
    assert rec.finish_reason == "length"


def test_chat_usage_on_the_finish_chunk() -> None:
    body = frames(
        chat({"role": "assistant", "content": ""}),
        *(chat({"content": w}) for w in WORDS),
        chat({}, "length", usage(6)),
        "[DONE]",
    )
    rec = parse("chat", body)
    assert rec.error is None
    assert rec.chunk_tokens == [1] * 6 and rec.chunk_tokens_exact
    assert rec.output_tokens_server == 6


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_no_usage_at_all_leaves_the_count_unknown(endpoint: str) -> None:
    # Text arrived but nothing says how many tokens: the record says so (no server count, no
    # client count), and the measurement's `tokens_counted` check fails the run.
    chunks = (
        [completion(w) for w in WORDS] + [completion("", "length")]
        if endpoint == "completions"
        else [chat({"content": w}) for w in WORDS] + [chat({}, "length")]
    )
    rec = parse(endpoint, frames(*chunks, "[DONE]"))
    assert rec.error is None
    assert rec.output_tokens_server is None and rec.output_tokens_client is None
    assert rec.output_tokens is None
    assert not rec.chunk_tokens_exact


@pytest.mark.parametrize("read", [None, 7])
def test_running_usage_on_every_chunk_including_finish_and_usage_chunks(
    read: int | None,
) -> None:
    # continuous_usage_stats honoured: every chunk, the finish chunk and the usage chunk
    # carry the cumulative count; two tokens per chunk (speculative decoding).
    body = frames(
        completion(" a b", usage=usage(2)),
        completion(" c d", usage=usage(4)),
        completion(" e f", usage=usage(6)),
        completion("", "length", usage(6)),
        {"id": "cmpl-1", "object": "text_completion", "choices": [], "usage": usage(6)},
        "[DONE]",
    )
    rec = parse("completions", body, read)
    assert rec.error is None
    assert rec.chunk_tokens == [2, 2, 2] and rec.chunk_tokens_exact
    assert rec.output_tokens_server == 6 and rec.output_tokens_client == 6


def test_running_usage_with_a_usage_chunk_and_role_chunk_usage() -> None:
    # SGLang chat with continuous usage: the role chunk carries usage 0, content chunks the
    # running count, then the usage chunk.
    body = frames(
        chat({"role": "assistant", "content": ""}, usage=usage(0)),
        *(chat({"content": w}, usage=usage(i + 1)) for i, w in enumerate(WORDS)),
        chat({}, "length", usage(6)),
        {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage(6)},
        "[DONE]",
    )
    rec = parse("chat", body)
    assert rec.error is None
    assert rec.chunk_tokens == [1] * 6
    assert rec.output_tokens_server == 6 and rec.output_tokens_client == 6


def test_usage_on_every_chunk_that_never_counts_up_counts_no_tokens() -> None:
    # A broken running count (always 0): text arrived, no tokens counted. The record shows it
    # (no token chunks) and the measurement's `tokens_counted` check fails the run.
    body = frames(
        *(completion(w, usage=usage(0)) for w in WORDS),
        completion("", "length", usage(0)),
        "[DONE]",
    )
    rec = parse("completions", body)
    assert rec.chunk_tokens == []
    assert not rec.output_tokens


@pytest.mark.parametrize("choices", [{"0": {"text": "a"}}, 5, "a"])
@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_choices_that_are_not_a_list_fail_the_request_by_name(endpoint: str, choices: Any) -> None:
    # A dishonest server's event: the request fails with what was wrong, the parser goes on.
    body = frames({"id": "c", "object": "x", "choices": choices}, "[DONE]")
    rec = parse(endpoint, body)
    assert rec.error is not None and "'choices' is not a list" in rec.error, rec.error
    whole = RequestRecord(index=0, warmup=False, input_len=7, output_len=6)
    StreamParser(endpoint, whole).whole(json.dumps({"choices": choices}).encode())
    assert whole.error is not None and "'choices' is not a list" in whole.error, whole.error
