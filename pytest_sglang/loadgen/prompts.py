"""Request bodies for a :class:`~pytest_sglang.loadgen.workload.Workload` (pure, deterministic).

Each request's prompt is drawn from its own random generator seeded with
``(workload.seed, salt, index)``: the same workload, run label and index always give the
same prompt, on any machine and Python version (string seeds are hashed with SHA-512), so two
servers measured with one workload see identical requests.

Prompts differ between requests, so SGLang's prefix (radix) cache cannot serve one request
from another: random token ids share a first token with probability 1/29000. The ``salt``
separates runs (the runner uses the load level, repeat number and warm-up or measured
phase): a repeat on the same server would otherwise find its prompts already cached by the
previous repeat and report a TTFT no fresh workload would see.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from pytest_sglang.loadgen.jsoncodec import dumps
from pytest_sglang.loadgen.workload import Workload

__all__ = ["PATHS", "TOKEN_ID_RANGE", "WORDS", "chat_text", "request_body", "token_ids"]

PATHS: Mapping[str, str] = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

#: Token ids of exact-length prompts: within every realistic vocabulary, above special ids.
TOKEN_ID_RANGE = range(1000, 30000)

#: Common English words that are a single token (with their leading space) in the GPT-2,
#: Llama, Mistral and Qwen BPE vocabularies: a chat message of N of them is about N tokens.
WORDS: tuple[str, ...] = (
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was",
    "at", "by", "be", "this", "are", "or", "from", "an", "but", "not", "you", "all", "can",
    "have", "one", "they", "we", "will", "has", "more", "its", "about", "time", "up", "out",
    "new", "so", "some", "what", "there", "when", "which", "their", "if", "would", "other",
    "into", "also", "after", "first", "two", "over", "most", "only", "like", "many", "year",
    "people", "work", "water", "house", "day", "world", "city", "light", "music", "story",
)  # fmt: skip


def _rng(workload: Workload, salt: str, index: int) -> random.Random:
    return random.Random(f"{workload.seed}/{salt}/{index}")


def token_ids(workload: Workload, salt: str, index: int) -> list[int]:
    """Return the ``workload.input_len`` prompt token ids of request ``index``."""
    return _rng(workload, salt, index).choices(TOKEN_ID_RANGE, k=workload.input_len)


def chat_text(workload: Workload, salt: str, index: int) -> str:
    """Return the chat message of request ``index``: ``input_len`` single-token words."""
    return " ".join(_rng(workload, salt, index).choices(WORDS, k=workload.input_len))


def request_body(
    workload: Workload, salt: str, index: int, *, model: str = "default"
) -> dict[str, Any]:
    """Return the JSON body of request ``index`` for ``workload.endpoint``.

    ``model`` is the OpenAI ``model`` field (SGLang echoes it and does not check it).
    """
    extra = dict(workload.extra)
    if workload.endpoint == "generate":
        sampling = {
            "max_new_tokens": workload.output_len,
            "ignore_eos": True,
            "temperature": workload.temperature,
            **extra.pop("sampling_params", {}),
        }
        return {
            "input_ids": token_ids(workload, salt, index),
            "sampling_params": sampling,
            "stream": workload.stream,
            **extra,
        }
    body: dict[str, Any] = {"model": model}
    if workload.endpoint == "completions":
        body["prompt"] = token_ids(workload, salt, index)
    else:
        body["messages"] = [{"role": "user", "content": chat_text(workload, salt, index)}]
    # max_tokens rather than chat's newer max_completion_tokens: every SGLang release has it.
    body.update(
        max_tokens=workload.output_len,
        ignore_eos=True,
        temperature=workload.temperature,
        stream=workload.stream,
    )
    if workload.stream:
        # include_usage: the server's token counts; continuous_usage_stats: a cumulative count
        # in every chunk, the only exact per-chunk token count the OpenAI stream can carry.
        body["stream_options"] = {
            "include_usage": True,
            "continuous_usage_stats": True,
            **extra.pop("stream_options", {}),
        }
    body.update(extra)
    return body


def encoded_bodies(
    workload: Workload, salt: str, count: int, *, model: str = "default"
) -> list[bytes]:
    """Return the JSON-encoded bodies of requests ``0 .. count - 1``, ready to send."""
    return [dumps(request_body(workload, salt, i, model=model)) for i in range(count)]
