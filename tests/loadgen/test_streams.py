"""The endpoint parsers on hand-written byte streams shaped like SGLang 0.5.23's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_sglang.loadgen.progress import Tally
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.streams import (
    StreamParser,
    describe_http_error,
)


def sse(*events: dict[str, Any] | str) -> list[bytes]:
    """One ``data: ...\\n\\n`` frame per event, compact JSON like SGLang's."""
    frames = []
    for event in events:
        payload = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
        frames.append(f"data: {payload}\n\n".encode())
    return frames


def record(output_len: int = 5) -> RequestRecord:
    return RequestRecord(index=0, warmup=False, input_len=7, output_len=output_len)


def feed(endpoint: str, reads: list[bytes], times: list[float] | None = None) -> RequestRecord:
    rec = record()
    parser = StreamParser(endpoint, rec)
    times = times or [1.0 + i for i in range(len(reads))]
    for data, now in zip(reads, times, strict=True):
        parser.feed(data, now)
    parser.finish(times[-1] + 0.5)
    return rec


# -- native /generate --------------------------------------------------------------------


def native_meta(completion_tokens: int, final: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": "3f9c0c1e6b7a4d2e8f1a2b3c4d5e6f70",
        "finish_reason": None,
        "prompt_tokens": 7,
        "weight_version": "default",
        "num_retractions": 0,
        "reasoning_tokens": 0,
        "completion_tokens": completion_tokens,
        "cached_tokens": 0,
        "response_sent_to_client_ts": 1733150000.123,
    }
    if final:
        meta.update(final)
    return meta


def native_chunk(ids: list[int], text: str, final: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"text": text, "output_ids": ids, "meta_info": native_meta(len(ids), final)}


SPEC_FINAL = {
    "finish_reason": {"type": "length", "length": 5},
    "e2e_latency": 0.412,
    "spec_accept_rate": 0.5,
    "spec_accept_length": 2.5,
    "spec_num_correct_drafts": 3,
    "spec_num_proposed_drafts": 6,
    "spec_verify_ct": 2,
    "spec_correct_drafts_histogram": [0, 1, 1],
}

# Cumulative text and ids, multi-token chunks (1, then 2, then 2) as under speculation.
NATIVE = sse(
    native_chunk([11], " Paris"),
    native_chunk([11, 12, 13], " Paris. It is"),
    native_chunk([11, 12, 13, 14, 15], " Paris. It is the capital", SPEC_FINAL),
    "[DONE]",
)


def test_native_counts_tokens_from_completion_tokens_not_chunks() -> None:
    rec = feed("generate", NATIVE)
    assert rec.error is None
    assert rec.chunk_times == [1.0, 2.0, 3.0]
    assert rec.chunk_tokens == [1, 2, 2]
    assert rec.chunk_tokens_exact
    assert rec.output_tokens_server == 5
    assert rec.output_tokens_client == 5  # the last cumulative output_ids list
    assert rec.prompt_tokens == 7
    assert rec.spec_verify_ct == 2
    assert rec.finish_reason == "length"


def test_native_split_across_arbitrary_reads() -> None:
    whole = b"".join(NATIVE)
    reads = [whole[i : i + 37] for i in range(0, len(whole), 37)]
    rec = feed("generate", reads)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 2, 2]
    # Each chunk is timed when its last byte arrived: strictly increasing read times.
    assert rec.chunk_times == sorted(rec.chunk_times)
    assert len(set(rec.chunk_times)) == 3


def test_native_events_in_one_read_share_its_time() -> None:
    rec = feed("generate", [b"".join(NATIVE)], [4.0])
    assert rec.chunk_times == [4.0, 4.0, 4.0]
    assert rec.chunk_tokens == [1, 2, 2]


def test_native_incremental_streaming_output_counts_ids_once() -> None:
    # --incremental-streaming-output: text and output_ids are deltas, completion_tokens
    # stays cumulative.
    reads = sse(
        {"text": " Paris", "output_ids": [11], "meta_info": native_meta(1)},
        {"text": ". It is", "output_ids": [12, 13], "meta_info": native_meta(3)},
        {
            "text": " the capital",
            "output_ids": [14, 15],
            "meta_info": native_meta(5, {"finish_reason": {"type": "length", "length": 5}}),
        },
        "[DONE]",
    )
    rec = feed("generate", reads)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 2, 2]
    assert rec.output_tokens_client == 5


def test_native_client_count_disagrees_when_ids_do_not_match() -> None:
    reads = sse(
        native_chunk([11], " a"),
        {
            "text": " a b c",
            "output_ids": [11, 12, 13, 14],  # the server says 3 tokens but sent four ids
            "meta_info": native_meta(3, {"finish_reason": {"type": "length", "length": 3}}),
        },
        "[DONE]",
    )
    rec = feed("generate", reads)
    assert rec.output_tokens_server == 3
    assert rec.output_tokens_client == 4


def test_native_without_spec_has_no_verify_count() -> None:
    reads = sse(
        native_chunk([11], " a"),
        native_chunk([11, 12], " a b", {"finish_reason": {"type": "length", "length": 2}}),
        "[DONE]",
    )
    rec = feed("generate", reads)
    assert rec.error is None and rec.spec_verify_ct is None


def test_native_error_event_mid_stream() -> None:
    reads = sse(
        native_chunk([11], " a"),
        {
            "error": {
                "message": "The input is too long.",
                "type": "invalid_request_error",
                "code": 400,
                "retryable": False,
            }
        },
        "[DONE]",
    )
    rec = feed("generate", reads)
    assert rec.error == "error event in stream: The input is too long."
    assert rec.chunk_tokens == [1]  # what arrived before the error is kept


def test_native_abort_is_an_error() -> None:
    final = {"finish_reason": {"type": "abort", "message": "Abort by user", "status_code": 499}}
    reads = sse(native_chunk([11], " a"), native_chunk([11, 12], " a b", final), "[DONE]")
    rec = feed("generate", reads)
    assert rec.error == "the server aborted the request: Abort by user"
    assert rec.finish_reason == "abort"


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_openai_abort_is_an_error(endpoint: str) -> None:
    text: dict[str, Any] = {"text": " a"}
    finish: dict[str, Any] = {"text": "", "finish_reason": "abort"}
    if endpoint == "chat":
        text, finish = {"delta": {"content": " a"}}, {"delta": {}, "finish_reason": "abort"}
    reads = sse({"choices": [text]}, {"choices": [finish]}, "[DONE]")
    rec = feed(endpoint, reads)
    assert rec.error == "the server aborted the request (finish_reason 'abort')"
    assert rec.finish_reason == "abort"


def test_stream_cut_before_done_is_an_error() -> None:
    rec = feed("generate", NATIVE[:2])
    assert rec.error == "stream ended before 'data: [DONE]' after 2 events"
    assert rec.chunk_tokens == [1, 2]


def test_done_without_a_final_chunk_is_an_error() -> None:
    rec = feed("generate", [*NATIVE[:2], *sse("[DONE]")])
    assert rec.error == "stream ended without a final chunk (no finish_reason)"


def test_malformed_event_is_an_error() -> None:
    rec = feed("generate", [NATIVE[0], b'data: {"text": "unterminated\n\n', *NATIVE[1:]])
    assert rec.error is not None and rec.error.startswith("malformed JSON event:")


def test_a_json_body_instead_of_a_stream_is_an_error() -> None:
    rec = feed("generate", [b'{"text": " Paris", "meta_info": {}}'])
    assert rec.error is not None
    assert "no SSE events" in rec.error and "Paris" in rec.error


def test_events_after_done_are_ignored() -> None:
    rec = feed("generate", [*NATIVE, *sse(native_chunk([1, 2, 3, 4, 5, 6, 7], "x"))])
    assert rec.error is None and sum(rec.chunk_tokens) == 5


def test_parsers_feed_the_progress_tally() -> None:
    tally = Tally(total=1)
    rec = record()
    parser = StreamParser("generate", rec, tally)
    for data in NATIVE:
        parser.feed(data, 1.0)
    assert tally.tokens == 5


# -- /v1/completions ---------------------------------------------------------------------


def completion_chunk(
    text: str, finish: str | None = None, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    return {
        "id": "a1b2",
        "object": "text_completion",
        "created": 1700000000,
        "model": "default",
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": None,
            }
        ],
        "usage": usage,
    }


def running_usage(completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": 7,
        "total_tokens": 7 + completion_tokens,
        "completion_tokens": completion_tokens,
        "reasoning_tokens": 0,
    }


COMPLETIONS_USAGE_CHUNK = {
    "id": "a1b2",
    "object": "text_completion",
    "created": 1700000000,
    "model": "default",
    "choices": [],
    "usage": {
        "prompt_tokens": 7,
        "total_tokens": 12,
        "completion_tokens": 5,
        "reasoning_tokens": 0,
    },
}


def test_completions_with_continuous_usage_counts_exactly() -> None:
    reads = sse(
        completion_chunk(" Par", usage=running_usage(1)),
        completion_chunk("is. It is", usage=running_usage(3)),
        completion_chunk(" the capital", "length", running_usage(5)),
        COMPLETIONS_USAGE_CHUNK,
        "[DONE]",
    )
    rec = feed("completions", reads)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 2, 2]
    assert rec.chunk_times == [1.0, 2.0, 3.0]
    assert rec.chunk_tokens_exact
    assert rec.output_tokens_server == 5 and rec.output_tokens_client == 5
    assert rec.prompt_tokens == 7
    assert rec.finish_reason == "length"


def test_completions_one_token_per_chunk_is_proven_by_the_usage_chunk() -> None:
    reads = sse(
        *(completion_chunk(w) for w in (" a", " b", " c", " d")),
        completion_chunk(" e", "length"),
        COMPLETIONS_USAGE_CHUNK,
        "[DONE]",
    )
    rec = feed("completions", reads)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 1, 1, 1, 1]
    assert rec.chunk_tokens_exact
    assert rec.output_tokens_server == 5
    assert rec.output_tokens_client is None  # text cannot be counted without the tokenizer


def test_completions_multi_token_chunks_without_counts_are_spread() -> None:
    # 5 tokens in 3 chunks (speculative decoding), no per-chunk usage: spread as 1, 2, 2.
    reads = sse(
        completion_chunk(" Par"),
        completion_chunk("is. It is"),
        completion_chunk(" the capital", "length"),
        COMPLETIONS_USAGE_CHUNK,
        "[DONE]",
    )
    rec = feed("completions", reads)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 2, 2]
    assert not rec.chunk_tokens_exact
    assert rec.output_tokens_server == 5


def test_completions_without_a_usage_chunk_has_no_server_count() -> None:
    reads = sse(completion_chunk(" a"), completion_chunk(" b", "length"), "[DONE]")
    rec = feed("completions", reads)
    assert rec.error is None
    assert rec.output_tokens_server is None
    assert not rec.chunk_tokens_exact


def test_completions_spec_details_from_sglext() -> None:
    reads = sse(
        completion_chunk(" a", usage=running_usage(1)),
        completion_chunk(" b c d e", "length", running_usage(5)),
        {
            "id": "a1b2",
            "object": "text_completion",
            "created": 1700000000,
            "model": "default",
            "choices": [],
            "sglext": {"spec_tokens_details": {"spec_accept_length": 2.5, "spec_verify_ct": 2}},
        },
        COMPLETIONS_USAGE_CHUNK,
        "[DONE]",
    )
    rec = feed("completions", reads)
    assert rec.error is None and rec.spec_verify_ct == 2


def test_openai_error_envelope_mid_stream() -> None:
    reads = sse(
        completion_chunk(" a"),
        {
            "object": "error",
            "message": "boom",
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        },
        "[DONE]",
    )
    rec = feed("completions", reads)
    assert rec.error == "error event in stream: boom"


# -- /v1/chat/completions ----------------------------------------------------------------


def chat_chunk(
    delta: dict[str, Any], finish: str | None = None, matched: int | None = None
) -> dict[str, Any]:
    return {
        "id": "c3d4",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "default",
        "choices": [
            {
                "index": 0,
                "delta": {"reasoning_content": None, **delta},
                "logprobs": None,
                "finish_reason": finish,
                "matched_stop": matched,
            }
        ],
    }


CHAT_USAGE_CHUNK: dict[str, Any] = {
    "id": "c3d4",
    "object": "chat.completion.chunk",
    "created": 1700000000,
    "model": "default",
    "choices": [],
    "usage": {
        "prompt_tokens": 19,
        "total_tokens": 22,
        "completion_tokens": 3,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    },
}

CHAT = sse(
    chat_chunk({"role": "assistant", "content": ""}),
    chat_chunk({"content": "Hel"}),
    chat_chunk({"content": "lo"}),
    chat_chunk({"content": "!"}),
    chat_chunk({}, "length"),
    CHAT_USAGE_CHUNK,
    "[DONE]",
)


def test_chat_role_and_finish_chunks_carry_no_tokens() -> None:
    rec = feed("chat", CHAT)
    assert rec.error is None
    # TTFT is the first content chunk (read 2 at t=2.0), not the role chunk at t=1.0.
    assert rec.chunk_times == [2.0, 3.0, 4.0]
    assert rec.chunk_tokens == [1, 1, 1]
    assert rec.chunk_tokens_exact
    assert rec.output_tokens_server == 3
    assert rec.prompt_tokens == 19
    assert rec.finish_reason == "length"


def test_chat_with_continuous_usage() -> None:
    def with_usage(chunk: dict[str, Any], tokens: int) -> dict[str, Any]:
        return {**chunk, "usage": {**CHAT_USAGE_CHUNK["usage"], "completion_tokens": tokens}}

    reads = sse(
        with_usage(chat_chunk({"role": "assistant", "content": ""}), 0),
        with_usage(chat_chunk({"content": "Hel"}), 1),
        with_usage(chat_chunk({"content": "lo!"}), 3),
        with_usage(chat_chunk({}, "stop", 128009), 3),
        CHAT_USAGE_CHUNK,
        "[DONE]",
    )
    rec = feed("chat", reads)
    assert rec.error is None
    assert rec.chunk_tokens == [1, 2]
    assert rec.output_tokens_client == 3 and rec.output_tokens_server == 3
    assert rec.finish_reason == "stop"


def test_chat_reasoning_content_counts_as_generated() -> None:
    reads = sse(
        chat_chunk({"role": "assistant", "content": ""}),
        chat_chunk({"reasoning_content": "think", "content": None}),
        chat_chunk({"content": "ok"}),
        chat_chunk({}, "length"),
        {**CHAT_USAGE_CHUNK, "usage": {**CHAT_USAGE_CHUNK["usage"], "completion_tokens": 2}},
        "[DONE]",
    )
    rec = feed("chat", reads)
    assert rec.error is None and rec.chunk_tokens == [1, 1] and rec.chunk_tokens_exact


def test_chat_without_finish_chunk_is_an_error() -> None:
    rec = feed("chat", [*CHAT[:4], *sse("[DONE]")])
    assert rec.error == "stream ended without a final chunk (no finish_reason)"


# -- non-streamed bodies and HTTP errors -------------------------------------------------


def test_native_body() -> None:
    body = json.dumps(
        {
            "text": " Paris. It is",
            "output_ids": [1, 2, 3, 4, 5],
            "meta_info": native_meta(5, SPEC_FINAL),
        }
    ).encode()
    rec = record()
    StreamParser("generate", rec).whole(body)
    assert rec.error is None
    assert (rec.output_tokens_server, rec.output_tokens_client) == (5, 5)
    assert rec.spec_verify_ct == 2 and rec.prompt_tokens == 7 and rec.finish_reason == "length"
    assert rec.chunk_times == []


def test_openai_bodies() -> None:
    usage = {
        "prompt_tokens": 12,
        "total_tokens": 28,
        "completion_tokens": 16,
        "prompt_tokens_details": None,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }
    completion = {
        "id": "a1b2",
        "object": "text_completion",
        "created": 1700000000,
        "model": "default",
        "choices": [
            {
                "index": 0,
                "text": " Paris.",
                "logprobs": None,
                "finish_reason": "length",
                "matched_stop": None,
            }
        ],
        "usage": usage,
        "metadata": {"weight_version": "default"},
    }
    chat = {
        "id": "c3d4",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "default",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!", "reasoning_content": None},
                "logprobs": None,
                "finish_reason": "stop",
                "matched_stop": 128009,
            }
        ],
        "usage": usage,
        "metadata": {"weight_version": "default"},
    }
    for endpoint, body, finish in (("completions", completion, "length"), ("chat", chat, "stop")):
        rec = record()
        StreamParser(endpoint, rec).whole(json.dumps(body).encode())
        assert rec.error is None
        assert (rec.output_tokens_server, rec.prompt_tokens, rec.finish_reason) == (16, 12, finish)
        assert rec.output_tokens_client is None


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            400,
            b'{"error": {"message": "The input (200 tokens) is longer than the model\'s '
            b'context length (64 tokens)."}}',
            "HTTP 400: The input (200 tokens) is longer than the model's context length "
            "(64 tokens).",
        ),
        (400, b'{"error": "input_ids: expected a list"}', "HTTP 400: input_ids: expected a list"),
        (
            400,
            b'{"object":"error","message":"1 validation error","type":"Bad Request",'
            b'"param":null,"code":400}',
            "HTTP 400: 1 validation error",
        ),
        (401, b'{"error":"Unauthorized"}', "HTTP 401: Unauthorized"),
        (405, b'{"detail":"Method Not Allowed"}', "HTTP 405: Method Not Allowed"),
        (503, b"", "HTTP 503: (empty body)"),
        (502, b"<html>Bad Gateway</html>", "HTTP 502: <html>Bad Gateway</html>"),
    ],
)
def test_http_error_messages(status: int, body: bytes, expected: str) -> None:
    assert describe_http_error(status, body) == expected


def test_error_body_with_status_200_is_a_failure() -> None:
    rec = record()
    StreamParser("generate", rec).whole(b'{"error": {"message": "bad"}}')
    assert rec.error == "error response: bad"


@pytest.mark.parametrize("error", [b"500", b"true", b'["overloaded"]'])
def test_an_error_of_any_other_shape_fails_the_request(error: bytes) -> None:
    rec = record()
    StreamParser("generate", rec).whole(b'{"error": ' + error + b', "text": ""}')
    assert rec.error is not None and rec.error.startswith("error response: ")
