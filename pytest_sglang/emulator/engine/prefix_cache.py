"""A prefix (radix) cache of token ids: how many prompt tokens SGLang would find cached.

SGLang's radix cache keeps the KV of every sequence it computed (prompt and output) and
serves the longest cached prefix of a new prompt, always recomputing at least the prompt's
last token; ``meta_info.cached_tokens`` is that match (``cached_tokens_details`` is set when
it is not 0). The emulator keeps the same token-id trie, bounded by the KV capacity: when it
would hold more tokens than that, it is emptied (SGLang evicts least-recently-used leaves;
emptying is cruder but keeps the bound; the trie costs about 270 bytes per cached token, some
140 MB at the default 524288-token capacity). Hits cut prefill time as in SGLang: the batch
engine prefills only the prompt tokens after the cached prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeAlias

_Node: TypeAlias = dict[int, "_Node"]


class PrefixCache:
    """A trie of token ids with a token budget; ``enabled=False`` never matches."""

    def __init__(self, capacity: int, *, enabled: bool = True) -> None:
        self.capacity = max(1, capacity)
        self.enabled = enabled
        self._root: _Node = {}
        self.tokens = 0

    def match(self, ids: Sequence[int]) -> int:
        """Return the cached tokens of prompt ``ids``: its longest cached prefix, < ``len``."""
        if not self.enabled or len(ids) < 2:
            return 0
        node = self._root
        matched = 0
        for token in ids[: len(ids) - 1]:
            child = node.get(token)
            if child is None:
                break
            node = child
            matched += 1
        return matched

    def clear(self) -> None:
        """Forget everything (``/flush_cache``)."""
        self._root = {}
        self.tokens = 0

    def insert(self, ids: Sequence[int]) -> None:
        """Remember the sequence ``ids`` (a prompt and its output)."""
        if not self.enabled:
            return
        if self.tokens + len(ids) > self.capacity:
            self._root = {}
            self.tokens = 0
        node = self._root
        for token in ids[: self.capacity]:
            if token not in node:
                node[token] = {}
                self.tokens += 1
            node = node[token]
