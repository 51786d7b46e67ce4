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
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DatasetError", "Entry", "Turn", "digest", "estimate_tokens", "length_pairs",
           "load_dataset", "shuffled_entries"]  # fmt: skip

#: Characters per token in the estimate of a text's tokens.
CHARS_PER_TOKEN = 4
#: ShareGPT's speaker names, as bench_serving and FastChat write them.
_ROLES = {
    "human": "user", "user": "user",
    "gpt": "assistant", "assistant": "assistant", "chatgpt": "assistant", "bard": "assistant",
    "bing": "assistant", "model": "assistant",
    "system": "system",
}  # fmt: skip


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
    #: The turn a single-turn request sends (with the history before it): the first, or the
    #: last of chat messages given as such (all of them are sent).
    single: int = 0

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


def _entry(data: object, origin: str) -> Entry | None:
    """Parse one object; ``None`` for a ShareGPT conversation too short to use."""
    if not isinstance(data, dict):
        raise _fail(
            origin,
            f"a {type(data).__name__} where an object was expected",
            'write one object per line, e.g. {"prompt": "Hello"}',
        )
    output_len = data.get("output_len")
    if "output_len" in data and (type(output_len) is not int or output_len < 1):
        fix = "give the answer's tokens as an integer >= 1"
        raise _fail(origin, f"output_len is {output_len!r}", fix)
    for key in _SHAPES:
        if key in data:
            return _messages(data[key], key, origin, output_len)
    for key in ("prompt", "text"):
        if key in data:
            prompt = _text(data[key], origin, f"'{key}'")
            answers = [data[k] for k in ("completion", "answer", "output") if k in data]
            answer = _text(answers[0], origin, "the answer") if answers else None
            return Entry(origin, (Turn(prompt, answer, output_len),))
    raise _fail(
        origin,
        f"an object with keys {sorted(data)[:6]}, none of 'prompt', 'text', 'messages' or "
        "'conversations'",
        'write {"prompt": "..."}, {"messages": [{"role": "user", "content": "..."}]} or '
        'ShareGPT\'s {"conversations": [{"from": "human", "value": "..."}, ...]}',
    )


#: How each shape writes a message: the speaker's key and the text's, the speakers allowed
#: (and the role each is), and how a bad speaker is named.
_SHAPES = {
    "messages": ("role", "content", {r: r for r in ("system", "user", "assistant")}, "has role"),
    "conversations": ("from", "value", _ROLES, "is from"),
}


def _messages(value: object, key: str, origin: str, output_len: int | None) -> Entry | None:
    """Parse chat ``messages`` as given, or a ShareGPT conversation (``None``: too short).

    Chat messages must alternate user and assistant after the system ones and end with the
    user's; ShareGPT's quirks (an answer first, two answers in a row) are skipped, as there.
    """
    who, what, roles, verb = _SHAPES[key]
    verbatim = key == "messages"
    if not isinstance(value, list) or (verbatim and not value):
        raise _fail(origin, f"'{key}' is not a non-empty list", "give a list of messages")
    system: list[str] = []
    turns: list[Turn] = []
    for number, message in enumerate(value, 1):
        keys = message if isinstance(message, dict) else {}
        if what not in keys or (verbatim and who not in keys):
            example = f'{{"{who}": "{"user" if verbatim else "human"}", "{what}": "..."}}'
            problem = f"message {number} is {json.dumps(message)[:80]}"
            raise _fail(origin, problem, f"write each message as {example}")
        speaker = str(message.get(who))
        role = roles.get(speaker if verbatim else speaker.lower())
        if role is None:
            fix = f"use one of {', '.join(sorted(roles))}"
            raise _fail(origin, f"message {number} {verb} {message.get(who)!r}", fix)
        content = _text(message[what], origin, f"message {number}'s content")
        answered = not turns or turns[-1].answer is not None
        if role == "system" and not turns:
            system.append(content)
        elif role == "user" and (answered or not verbatim):
            turns.append(Turn(content))
        elif role == "assistant" and not answered:
            turns[-1] = Turn(turns[-1].user, content)
        elif verbatim:
            problem = f"a {role} message where a user message was expected"
            if role == "user":
                problem = "two user messages in a row"
            fix = "alternate user and assistant messages after the system ones"
            raise _fail(origin, problem, fix)
    if not verbatim:  # bench_serving leaves out conversations of fewer than two messages
        return Entry(origin, tuple(turns), tuple(system)) if len(value) >= 2 and turns else None
    if not turns or turns[-1].answer is not None:
        problem = f"the last message is the {role}'s"
        raise _fail(origin, problem, "end with the user message the server is to answer")
    turns[-1] = Turn(turns[-1].user, None, output_len)
    return Entry(origin, tuple(turns), tuple(system), single=len(turns) - 1)


def _read(path: str, what: str, fix: str = "") -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{what} {path!r} cannot be read: {exc}{fix}") from None


@functools.cache
def digest(path: str) -> str:
    """Return the SHA-256 of the file at ``path`` (hex), for workload keys."""
    return hashlib.sha256(_read(path, "dataset").encode()).hexdigest()


@functools.cache
def length_pairs(path: str) -> tuple[tuple[int, int], ...]:
    """Read a lengths file (``Workload.lengths_file``): ``INPUT OUTPUT`` pairs, ``#`` comments."""
    pairs = []
    for number, line in enumerate(_read(path, "Workload.lengths_file").splitlines(), 1):
        text = line.split("#", 1)[0].replace(",", " ").split()
        if not text:
            continue
        try:
            pair = (int(text[0]), int(text[1]))
        except (ValueError, IndexError):
            raise DatasetError(
                f"{path}:{number}: {line!r} is not 'INPUT OUTPUT' (two token counts)"
            ) from None
        if len(text) != 2 or min(pair) < 1:
            raise DatasetError(f"{path}:{number}: {line!r}: two token counts >= 1 expected")
        pairs.append(pair)
    if not pairs:
        raise DatasetError(f"Workload.lengths_file {path!r} holds no length pairs")
    return tuple(pairs)


@functools.cache
def load_dataset(path: str) -> tuple[Entry, ...]:
    """Read a dataset file (``docs/workloads.md``): its entries in file order."""
    fix = "; give the path of a local JSONL or JSON file (datasets are never downloaded)"
    content = _read(path, "dataset", fix)
    items: list[tuple[object, str]] = []
    if content.lstrip().startswith("["):
        try:
            array = json.loads(content)
        except json.JSONDecodeError as exc:
            problem = f"not valid JSON ({exc.msg})"
            raise _fail(f"{path}:{exc.lineno}", problem, "fix the JSON array") from None
        items = [(data, f"{path}: item {number}") for number, data in enumerate(array, 1)]
    else:
        for number, line in enumerate(content.splitlines(), 1):
            try:
                items += [(json.loads(line), f"{path}:{number}")] if line.strip() else []
            except json.JSONDecodeError as exc:
                raise _fail(
                    f"{path}:{number}",
                    f"not valid JSON ({exc.msg}, column {exc.colno}): {line[:80]!r}",
                    "write one JSON object per line (JSON Lines)",
                ) from None
    entries = tuple(e for data, origin in items if (e := _entry(data, origin)) is not None)
    if not entries:
        raise DatasetError(
            f"dataset {path!r} holds no usable entry ({len(items)} objects read); give "
            'objects such as {"prompt": "..."} or ShareGPT conversations of two messages or more'
        )
    return entries


@functools.cache
def _eligible(path: str, input_len: int, turns: int | None, chat: bool) -> tuple[Entry, ...]:
    """Return the entries a workload can send, or raise saying why none.

    An entry is eligible when its request (single-turn), or its session's last turn
    (``turns``), fits ``input_len`` estimated tokens; a session needs ``turns`` user turns
    each but the last answered; a request on a non-chat endpoint must be a single message.
    """
    entries = load_dataset(path)
    kept: list[Entry] = []
    left_out: Counter[str] = Counter()
    for entry in entries:
        last = entry.single if turns is None else turns - 1
        if len(entry.turns) <= last or any(t.answer is None for t in entry.turns[:last]):
            left_out[f"with fewer than {turns or 1} answered turns"] += 1
        elif not chat and (entry.system or last > 0):
            raise _fail(
                entry.origin,
                "chat messages (a system message or earlier turns) on a text endpoint",
                "measure it with Workload(endpoint='chat')",
            )
        elif entry.prompt_estimate(last) > input_len:
            left_out[f"longer than input_len={input_len} estimated tokens"] += 1
        else:
            kept.append(entry)
    if not kept:
        why = ", ".join(f"{count} {reason}" for reason, count in left_out.items())
        raise DatasetError(
            f"dataset {path!r}: none of its {len(entries)} entries can be sent ({why}); raise "
            "input_len (the longest prompt admitted, at 4 characters a token)"
            + (" or lower turns" if turns else "")
        )
    return tuple(kept)


@functools.lru_cache(maxsize=16)
def shuffled_entries(
    path: str, input_len: int, turns: int | None, chat: bool, seed: int, salt: str
) -> tuple[Entry, ...]:
    """Return the entries the run ``salt`` of a workload sends, in turn, then again.

    As bench_serving samples: the eligible entries are shuffled (seeded by ``seed`` and the
    run) and taken without replacement until the dataset is exhausted. Raises
    :class:`DatasetError` naming the file, the line and the fix.
    """
    order = list(_eligible(path, input_len, turns, chat))
    random.Random(f"{seed}/{salt}/dataset").shuffle(order)
    return tuple(order)
