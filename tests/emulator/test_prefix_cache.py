"""The emulated radix cache: what ``cached_tokens`` reports (pure)."""

from __future__ import annotations

from pytest_sglang.emulator.engine.prefix_cache import PrefixCache


def test_longest_cached_prefix_but_never_the_last_token() -> None:
    cache = PrefixCache(1000)
    assert cache.match([1, 2, 3]) == 0
    cache.insert([1, 2, 3, 9, 9])  # a prompt and its output
    assert cache.match([1, 2, 3]) == 2  # the last prompt token is always computed
    assert cache.match([1, 2, 3, 9, 9, 4]) == 5
    assert cache.match([1, 5]) == 1 and cache.match([7, 1, 2]) == 0
    cache.clear()
    assert cache.match([1, 2, 3]) == 0


def test_bounded_and_switchable() -> None:
    cache = PrefixCache(10)
    cache.insert(list(range(8)))
    cache.insert(list(range(100, 108)))  # over the budget: emptied first
    assert cache.tokens == 8 and cache.match(list(range(8))) == 0
    off = PrefixCache(100, enabled=False)
    off.insert([1, 2, 3])
    assert off.match([1, 2, 3]) == 0
