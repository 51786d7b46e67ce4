"""Dataset files given by path: prompts, chat messages and ShareGPT conversations (no network).

A local JSON Lines file or JSON array, never downloaded; the shapes of its objects, the
``bench_serving`` conventions followed and the 4-characters-a-token estimate are in
``docs/workloads.md`` ("Dataset files"). Errors name the file, the line and the fix.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DatasetError",
    "Entry",
    "Turn",
    "digest",
    "eligible_entries",
    "estimate_tokens",
    "load_dataset",
    "pick_entry",
]

#: Characters per token in the estimate of a text's tokens.
CHARS_PER_TOKEN = 4
#: ShareGPT's speaker names, as bench_serving and FastChat write them.
_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
    "bing": "assistant", "model": "assistant",
    "system": "system",
}  # fmt: skip
_ANSWER_KEYS = ("completion", "answer", "output")


class DatasetError(ValueError):
    """A dataset file cannot be used: the message names the file, the line and the fix."""


def estimate_tokens(text: str) -> int:
    """Return the estimated tokens of ``text``: 4 characters a token, at least 1."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


@dataclass(frozen=True)
class Turn:
    """One user message and the answer that followed it in the file (if any)."""

    user: str
    answer: str | None = None
    #: The file's own count of the answer's tokens (``output_len``), when it gives one.
    output_len: int | None = None

    def output_estimate(self) -> int | None:
        """Return the answer's tokens: the file's count, else estimated from its text."""
        if self.output_len is not None:
            return self.output_len
        return None if self.answer is None else estimate_tokens(self.answer)


@dataclass(frozen=True)
class Entry:
    """One object of a dataset file: system messages, then user turns with their answers."""

    #: Where it came from: ``file:line`` (JSONL) or ``file: item N`` (JSON array).
    origin: str
    turns: tuple[Turn, ...]
    system: tuple[str, ...] = ()
    #: A text prompt (``prompt`` / ``text``), not chat messages.
    text: bool = False
    #: Chat messages given as such: a single-turn request sends all of them.
    verbatim: bool = False

    def single_turn(self) -> int:
        """Return the turn a single-turn request sends (with the history before it)."""
        return len(self.turns) - 1 if self.verbatim else 0

    def messages(self, turn: int) -> list[dict[str, str]]:
        """Return the chat messages of turn ``turn``: system, history, its user message."""
        messages = [{"role": "system", "content": content} for content in self.system]
        for earlier in self.turns[:turn]:
            messages.append({"role": "user", "content": earlier.user})
            messages.append({"role": "assistant", "content": earlier.answer or ""})
        messages.append({"role": "user", "content": self.turns[turn].user})
        return messages

    def prompt_estimate(self, turn: int) -> int:
        """Return the estimated prompt tokens of turn ``turn`` (its messages' text only)."""
        return sum(estimate_tokens(m["content"]) for m in self.messages(turn))


def _fail(origin: str, problem: str, fix: str) -> DatasetError:
    return DatasetError(f"{origin}: {problem}; {fix}")


def _text(value: object, origin: str, what: str) -> str:
    if not isinstance(value, str):
        raise _fail(
            origin,
            f"{what} is {type(value).__name__} {json.dumps(value)[:80]}, not text",
            "write it as a JSON string (images and other content parts are not supported)",
        )
    return value


def _count(value: object, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(
            origin, f"output_len is {value!r}", "give the answer's tokens as an integer >= 1"
        )
    return value


def _entry(data: object, origin: str) -> Entry | None:
    """Parse one object; ``None`` for a ShareGPT conversation too short to use."""
    if not isinstance(data, dict):
        raise _fail(
            origin,
            f"a {type(data).__name__} where an object was expected",
            'write one object per line, e.g. {"prompt": "Hello"}',
        )
    output_len = _count(data["output_len"], origin) if "output_len" in data else None
    if "conversations" in data:
        return _conversation(data["conversations"], origin)
    if "messages" in data:
        return _messages(data["messages"], origin, output_len)
    for key in ("prompt", "text"):
        if key in data:
            prompt = _text(data[key], origin, f"'{key}'")
            answers = [data[k] for k in _ANSWER_KEYS if k in data]
            answer = _text(answers[0], origin, "the answer") if answers else None
            return Entry(origin, (Turn(prompt, answer, output_len),), text=True)
    raise _fail(
        origin,
        f"an object with keys {sorted(data)[:6]}, none of 'prompt', 'text', 'messages' or "
        "'conversations'",
        'write {"prompt": "..."}, {"messages": [{"role": "user", "content": "..."}]} or '
        'ShareGPT\'s {"conversations": [{"from": "human", "value": "..."}, ...]}',
    )


def _messages(value: object, origin: str, output_len: int | None) -> Entry:
    if not isinstance(value, list) or not value:
        raise _fail(origin, "'messages' is not a non-empty list", "give a list of messages")
    pairs = []
    for number, message in enumerate(value, 1):
        if not isinstance(message, dict) or "role" not in message or "content" not in message:
            raise _fail(
                origin,
                f"message {number} is {json.dumps(message)[:80]}",
                'write each message as {"role": "user", "content": "..."}',
            )
        role = message["role"]
        if role not in ("system", "user", "assistant"):
            raise _fail(
                origin,
                f"message {number} has role {role!r}",
                "use 'system', 'user' or 'assistant'",
            )
        pairs.append((role, _text(message["content"], origin, f"message {number}'s content")))
    if pairs[-1][0] != "user":
        raise _fail(
            origin,
            f"the last message is the {pairs[-1][0]}'s",
            "end with the user message the server is to answer",
        )
    entry = _turns(pairs, origin, verbatim=True)
    last = entry.turns[-1]
    turns = (*entry.turns[:-1], Turn(last.user, None, output_len))
    return Entry(origin, turns, entry.system, verbatim=True)


def _conversation(value: object, origin: str) -> Entry | None:
    if not isinstance(value, list):
        raise _fail(origin, "'conversations' is not a list", "give ShareGPT's list of messages")
    pairs = []
    for number, message in enumerate(value, 1):
        if not isinstance(message, dict) or "value" not in message:
            raise _fail(
                origin,
                f"message {number} is {json.dumps(message)[:80]}",
                'write each message as {"from": "human", "value": "..."}',
            )
        speaker = str(message.get("from", "")).lower()
        if speaker not in _ROLES:
            raise _fail(
                origin,
                f"message {number} is from {message.get('from')!r}",
                f"use one of {', '.join(sorted(_ROLES))}",
            )
        pairs.append((_ROLES[speaker], _text(message["value"], origin, f"message {number}")))
    # bench_serving leaves out conversations of fewer than two messages.
    if len(pairs) < 2:
        return None
    entry = _turns(pairs, origin, verbatim=False)
    return entry if entry.turns else None


def _turns(pairs: list[tuple[str, str]], origin: str, *, verbatim: bool) -> Entry:
    system: list[str] = []
    turns: list[Turn] = []
    for role, content in pairs:
        if role == "system" and not turns:
            system.append(content)
        elif role == "user":
            if verbatim and turns and turns[-1].answer is None:
                raise _fail(
                    origin,
                    "two user messages in a row",
                    "alternate user and assistant messages (join the two user messages)",
                )
            turns.append(Turn(content))
        elif role == "assistant" and turns and turns[-1].answer is None:
            turns[-1] = Turn(turns[-1].user, content)
        elif verbatim:
            raise _fail(
                origin,
                f"a {role} message where a user message was expected",
                "alternate user and assistant messages after the system ones",
            )
        # ShareGPT quirks (an answer first, two answers in a row) are skipped, as there.
    return Entry(origin, tuple(turns), tuple(system), verbatim=verbatim)


@functools.cache
def digest(path: str) -> str:
    """Return the SHA-256 of the file at ``path`` (hex), for workload keys."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError as exc:
        raise DatasetError(f"dataset {path!r} cannot be read: {exc}") from None


@functools.cache
def load_dataset(path: str) -> tuple[Entry, ...]:
    """Read a dataset file (``docs/workloads.md``); the entries in file order.

    Raises :class:`DatasetError` naming the file, the line and the fix.
    """
    try:
        content = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(
            f"dataset {path!r} cannot be read: {exc}; give the path of a local JSONL or JSON "
            "file (datasets are never downloaded)"
        ) from None
    items: list[tuple[object, str]] = []
    if content.lstrip().startswith("["):
        try:
            array = json.loads(content)
        except json.JSONDecodeError as exc:
            raise _fail(
                f"{path}:{exc.lineno}", f"not valid JSON ({exc.msg})", "fix the JSON array"
            ) from None
        items = [(data, f"{path}: item {number}") for number, data in enumerate(array, 1)]
    else:
        for number, line in enumerate(content.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data: Any = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _fail(
                    f"{path}:{number}",
                    f"not valid JSON ({exc.msg}, column {exc.colno}): {line[:80]!r}",
                    "write one JSON object per line (JSON Lines)",
                ) from None
            items.append((data, f"{path}:{number}"))
    entries = tuple(e for data, origin in items if (e := _entry(data, origin)) is not None)
    if not entries:
        raise DatasetError(
            f"dataset {path!r} holds no usable entry ({len(items)} objects read); give "
            'objects such as {"prompt": "..."} or ShareGPT conversations of two messages or more'
        )
    return entries


@functools.cache
def eligible_entries(
    path: str, *, input_len: int, turns: int | None, chat: bool
) -> tuple[int, ...]:
    """Return the indices of the entries a workload can send, or raise saying why none.

    An entry is eligible when its request (single-turn), or its session's last turn
    (``turns``), fits ``input_len`` estimated tokens; a session needs ``turns`` user turns
    each but the last answered; a request on a non-chat endpoint must be a single message.
    """
    entries = load_dataset(path)
    wanted = 1 if turns is None else turns
    kept: list[int] = []
    reasons: dict[str, int] = {}
    for index, entry in enumerate(entries):
        last = entry.single_turn() if turns is None else turns - 1
        if len(entry.turns) < wanted or any(t.answer is None for t in entry.turns[:last]):
            key = f"with fewer than {wanted} answered turns"
            reasons[key] = reasons.get(key, 0) + 1
            continue
        if not chat and (entry.system or last > 0):
            raise _fail(
                entry.origin,
                "chat messages (a system message or earlier turns) on a text endpoint",
                "measure it with Workload(endpoint='chat')",
            )
        if entry.prompt_estimate(last) > input_len:
            key = f"longer than input_len={input_len} estimated tokens"
            reasons[key] = reasons.get(key, 0) + 1
            continue
        kept.append(index)
    if not kept:
        why = ", ".join(f"{count} {reason}" for reason, count in reasons.items())
        raise DatasetError(
            f"dataset {path!r}: none of its {len(entries)} entries can be sent ({why}); raise "
            "input_len (the longest prompt admitted, at 4 characters a token)"
            + (" or lower turns" if turns else "")
        )
    return tuple(kept)


@functools.lru_cache(maxsize=16)
def _order(
    path: str, input_len: int, turns: int | None, chat: bool, seed: int, salt: str
) -> tuple[int, ...]:
    order = list(eligible_entries(path, input_len=input_len, turns=turns, chat=chat))
    random.Random(f"{seed}/{salt}/dataset").shuffle(order)
    return tuple(order)


def pick_entry(
    path: str,
    number: int,
    *,
    input_len: int,
    turns: int | None,
    chat: bool,
    seed: int,
    salt: str,
) -> Entry:
    """Return the entry of request (or session) ``number`` of the run ``salt``.

    As bench_serving samples: the eligible entries are shuffled (seeded by ``seed`` and the
    run) and taken in turn, without replacement until the dataset is exhausted, then again.
    """
    order = _order(path, input_len, turns, chat, seed, salt)
    return load_dataset(path)[order[number % len(order)]]
