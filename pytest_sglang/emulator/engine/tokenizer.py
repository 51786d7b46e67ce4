"""A deterministic fake tokenizer.

Approximations, documented because clients may cross-check token counts:

- a text prompt has one token per whitespace-separated word (at least one: an empty prompt
  counts as its BOS token); ``input_ids`` are taken as given;
- a chat prompt adds a fixed template overhead (see ``chat_prompt_ids``);
- generated text cycles through a fixed sentence, one word per token, each token decoding to
  ``" word"``; where in the sentence a reply starts depends on the prompt, so different prompts
  get different (but reproducible) text. The EOS token decodes to nothing. Greedy output
  therefore does not depend on speculation, as on a correct server; ``diverge_at`` (the
  ``spec-diverge`` fault) shifts the words from that output position on.

Every id the tokenizer produces is inside the vocabulary (``vocab_size``, from the model's
``config.json`` when the model path is local): prompt words hash into the upper half of it,
output words sit in a block below, scaled down for small vocabularies.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

_SENTENCE = (
    "Paris. It is the largest city of France and its capital, known for its art, fashion, "
    "gastronomy and culture. The city is home to the Louvre, the Eiffel Tower and many "
    "cafes along the river Seine, where people meet, read and watch the boats go by."
).split()
# Output word ids sit in a block of the vocabulary that prompt words hashed elsewhere avoid.
_OUTPUT_BASE = 1000
_PROMPT_BASE = 2000
BOS_TOKEN_ID = 128000
# Per-message and reply-header overhead of a Llama-3-like chat template, in tokens.
CHAT_MESSAGE_OVERHEAD = 5
CHAT_REPLY_OVERHEAD = 4


class Tokenizer:
    """Encode prompts and decode generated ids; see the module docstring for the rules."""

    def __init__(self, vocab_size: int, eos_token_id: int, diverge_at: int | None = None) -> None:
        self.vocab_size = vocab_size
        self.diverge_at = diverge_at
        self.eos_token_id = eos_token_id
        # Large vocabularies keep the historical layout; small ones are scaled to fit.
        self._output_base = min(_OUTPUT_BASE, max(1, vocab_size // 4))
        self._prompt_base = min(_PROMPT_BASE, max(1, vocab_size // 2))
        self._prompt_span = max(1, vocab_size - self._prompt_base - min(1000, vocab_size // 8))
        self._bos = BOS_TOKEN_ID if BOS_TOKEN_ID + 6 < vocab_size else 1

    def in_vocabulary(self, token_id: int) -> bool:
        """Whether the model has a row for ``token_id`` (``0 <= id < vocab_size``)."""
        return 0 <= token_id < self.vocab_size

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: one per whitespace-separated word, at least one."""
        words = text.split()
        if not words:
            return [self._bos]
        base, span = self._prompt_base, self._prompt_span
        return [base + zlib.crc32(word.encode()) % span for word in words]

    def chat_prompt_ids(self, contents: Iterable[str]) -> list[int]:
        """Token ids of a chat prompt: BOS, each message with its header, the reply header."""
        bos = self._bos
        header = bos + 6 if bos + 6 < self.vocab_size else bos
        ids = [bos]
        for content in contents:
            ids.extend([header] * CHAT_MESSAGE_OVERHEAD)
            if content.split():
                ids.extend(self.encode(content))
        ids.extend([header] * CHAT_REPLY_OVERHEAD)
        return ids

    def output_ids(self, prompt_ids: Sequence[int], start: int, count: int) -> list[int]:
        """Return generated ids ``start .. start+count`` of the reply to ``prompt_ids``."""
        offset = prompt_offset(prompt_ids)
        size = len(_SENTENCE)
        base = self._output_base
        at = self.diverge_at
        return [
            base + (offset + i + (at is not None and i >= at)) % size
            for i in range(start, start + count)
        ]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of generated ``ids`` (prompt ids and EOS decode to nothing)."""
        size = len(_SENTENCE)
        base = self._output_base
        return "".join(f" {_SENTENCE[i - base]}" for i in ids if base <= i < base + size)


def prompt_offset(prompt_ids: Sequence[int]) -> int:
    """Hash a prompt stably; replies (and natural lengths) vary with it."""
    data = b"".join((i & 0xFFFFFFFF).to_bytes(4, "little") for i in prompt_ids[:4096])
    return zlib.crc32(data)
