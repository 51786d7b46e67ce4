"""Request bodies for a :class:`~pytest_sglang.loadgen.workload.Workload` (pure, deterministic).

Each prompt is drawn from a generator seeded with ``(workload.seed, salt, index)``: two
servers see identical prompts, and the ``salt`` (level, repeat, warm-up) keeps runs out of
each other's prefix cache. Token ids stay inside the served model's vocabulary (an id past
it crashes a real server: ``docs/emulator.md``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_sglang.loadgen.jsoncodec import dumps
from pytest_sglang.loadgen.workload import Workload

__all__ = ["PATHS", "UNIVERSAL_TOKEN_IDS", "WORDS", "chat_messages", "chat_text",
           "encoded_bodies", "request_body", "token_id_range", "token_ids"]  # fmt: skip

PATHS: Mapping[str, str] = {
    "generate": "/generate",
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
}

#: Token ids every tokenizer has: the 256 byte tokens of byte-level BPE (0-255) and
#: SentencePiece byte-fallback (3-258) vocabularies, less the first 16 (BOS, EOS, UNK, PAD).
#: What a workload that does not know the served model's vocabulary draws its prompts from.
UNIVERSAL_TOKEN_IDS = range(16, 256)

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


def token_id_range(vocab_size: int | None) -> range:
    """Return the ids prompts are drawn from for a vocabulary of ``vocab_size`` (or unknown)."""
    if vocab_size is None:
        return UNIVERSAL_TOKEN_IDS
    if vocab_size >= 2000:
        return range(1000, min(vocab_size, 30000))
    return range(min(16, vocab_size - 1), vocab_size)


def _draw(workload: Workload, salt: str, index: int, population: Sequence[Any]) -> list[Any]:
    """Request ``index``'s prompt of ``population`` items; a shared prefix comes first.

    A group's prefix comes from one generator per group and run: a repeat starts cold.
    """
    length = workload.lengths(salt, index)[0]
    prefix = []
    if workload.prefix_groups:
        group = random.Random(f"{workload.seed}/{salt}/prefix/{index % workload.prefix_groups}")
        prefix = group.choices(population, k=workload.prefix_len)
    rng = random.Random(f"{workload.seed}/{salt}/{index}")
    return prefix + rng.choices(population, k=length - len(prefix))


def token_ids(workload: Workload, salt: str, index: int) -> list[int]:
    """Return request ``index``'s prompt token ids, inside the vocabulary (``vocab_size``)."""
    return _draw(workload, salt, index, token_id_range(workload.vocab_size))


def chat_text(workload: Workload, salt: str, index: int) -> str:
    """Return the chat message of request ``index``: ``input_len`` single-token words."""
    return " ".join(_draw(workload, salt, index, WORDS))


def chat_messages(workload: Workload, salt: str, index: int) -> list[dict[str, str]]:
    """Return request ``index``'s messages: a dataset entry's, one, or a turn with its history."""
    if workload.dataset is not None:
        entry, turn = workload.entry(salt, index)
        return entry.messages(turn)
    if workload.turns is None:
        return [{"role": "user", "content": chat_text(workload, salt, index)}]
    messages = []
    for earlier in range(workload.session(index)[0] * workload.turns, index + 1):
        # A synthetic session's texts: single-token words, seeded per request and part.
        for role, part, length in (("user", "user", workload.input_len),
                                   ("assistant", "answer", workload.output_len)):  # fmt: skip
            rng = random.Random(f"{workload.seed}/{salt}/{part}/{earlier}")
            messages.append({"role": role, "content": " ".join(rng.choices(WORDS, k=length))})
    return messages[:-1]


def request_body(
    workload: Workload, salt: str, index: int, *, model: str = "default"
) -> dict[str, Any]:
    """Return the JSON body of request ``index`` for ``workload.endpoint``.

    ``model`` is the OpenAI ``model`` field (SGLang echoes it and does not check it).
    """
    extra = dict(workload.extra)
    output_len = workload.lengths(salt, index)[1]
    if workload.endpoint == "chat":
        body: dict[str, Any] = {"model": model, "messages": chat_messages(workload, salt, index)}
    else:
        # A text endpoint sends a dataset entry's one user message as the prompt (checked
        # at construction: no system message, no history).
        text = chat_messages(workload, salt, index)[-1]["content"] if workload.dataset else None
        prompt = token_ids(workload, salt, index) if text is None else text
        if workload.endpoint == "generate":
            sampling = {
                "max_new_tokens": output_len,
                "ignore_eos": True,
                "temperature": workload.temperature,
                **extra.pop("sampling_params", {}),
            }
            key = "input_ids" if text is None else "text"
            return {key: prompt, "sampling_params": sampling, "stream": workload.stream, **extra}
        body = {"model": model, "prompt": prompt}
    # max_tokens rather than chat's newer max_completion_tokens: every SGLang release has it.
    body.update(
        max_tokens=output_len,
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
