"""What a load test sends: the :class:`Workload` (lengths, request count, endpoint, seed).

A frozen, hashable value with a stable :meth:`Workload.key`, so measurements can be cached
per workload; :mod:`~pytest_sglang.loadgen.prompts` makes the bodies (``docs/guide.md``).
"""

from __future__ import annotations

import contextvars
import copy
import dataclasses
import json
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from pytest_sglang.loadgen import datasets

__all__ = ["DEFAULT_WARMUP_CAP", "ENDPOINTS", "Endpoint", "Workload", "check_count"]

#: Warm-up requests run by default: one per concurrency slot, at most this many.
DEFAULT_WARMUP_CAP = 8


def check_count(
    name: str, value: object, minimum: int | None = 1, none: str | None = None, hint: str = ""
) -> None:
    """Raise :class:`ValueError` unless ``value`` is an integer >= ``minimum``.

    ``None`` is allowed where ``none`` says what it means; ``hint`` ends the message.
    """
    if value is None and none is not None:
        return
    if isinstance(value, int) and not isinstance(value, bool):
        if minimum is None or value >= minimum:
            return
    allowed = "an integer" if minimum is None else f"an integer >= {minimum}"
    if none is not None:
        allowed = f"None ({none}) or {allowed}" if none else f"None or {allowed}"
    raise ValueError(f"{name} must be {allowed}, got {value!r}{hint}")


Endpoint = Literal["generate", "completions", "chat"]
ENDPOINTS: tuple[str, ...] = get_args(Endpoint)

#: Set while :meth:`Workload.from_dict` rebuilds a workload: its dataset file is not read.
_REBUILDING: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "pytest_sglang_rebuilding", default=False
)

#: Request fields that define the workload itself: letting ``extra`` override them would make
#: the realised lengths differ from the ones the measurement checks against.
_RESERVED_FIELDS = frozenset({"text", "input_ids", "prompt", "messages", "stream", "max_tokens",
                              "max_completion_tokens", "max_new_tokens", "ignore_eos",
                              "temperature"})  # fmt: skip


@dataclass(frozen=True)
class Workload:
    """A fixed-shape load: ``requests`` requests of ``input_len`` tokens in, ``output_len`` out.

    ``input_len`` is exact on ``generate`` and ``completions``, approximate on ``chat`` (its
    template adds tokens); ``output_len`` is exact (``ignore_eos``). ``warmup`` requests come
    on top (``None``: one per concurrency slot, at most :data:`DEFAULT_WARMUP_CAP`). The
    ``seed`` makes the prompts, so two servers see the same requests. ``extra`` fields are
    merged into every body (on ``generate``, a nested ``"sampling_params"`` into the sampling
    parameters), except those defining the workload. ``stream`` is needed for TTFT and ITL.

    ``requests_per_slot``: a run at concurrency C sends at least that many times C requests.
    ``vocab_size`` (the served model's, when known) keeps prompt ids inside the vocabulary
    (without it: ids 16-255, which every tokenizer has). Shared prefixes (``prefix_groups``,
    ``prefix_len``), length distributions (``range_ratio``, ``lengths_file``), dataset files
    (``dataset``, ``answer_lengths``) and multi-turn sessions (``turns``): ``docs/workloads.md``.
    """

    input_len: int
    output_len: int
    requests: int = 64
    endpoint: Endpoint = "generate"
    warmup: int | None = None
    seed: int = 0
    temperature: float = 0.0
    #: Left out of the hash (a mapping is not hashable); equal workloads still hash equal.
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    stream: bool = True
    requests_per_slot: int | None = None
    vocab_size: int | None = None
    prefix_groups: int | None = None
    prefix_len: int = 0
    range_ratio: float | None = None
    lengths_file: str | None = None
    dataset: str | None = None
    answer_lengths: bool = False
    turns: int | None = None

    def __post_init__(self) -> None:
        for name, minimum, none, hint in _INTEGERS:
            check_count(f"Workload.{name}", getattr(self, name), minimum, none, hint)
        for name, allowed, ok in _RULES:
            value = getattr(self, name)
            if not ok(value):
                raise ValueError(f"Workload.{name} must be {allowed}, got {value!r}")
        if self.prefix_groups is not None or self.prefix_len:
            hint = (
                "; it groups prefix_len tokens, e.g. Workload(..., prefix_groups=8, prefix_len=512)"
            )
            check_count("Workload.prefix_groups", self.prefix_groups, hint=hint)
            shortest = max(1, int(self.input_len * (self.range_ratio or 1)))
            if not isinstance(self.prefix_len, int) or not 1 <= self.prefix_len < shortest:
                raise ValueError(
                    f"Workload.prefix_len must be an integer in [1, {shortest}) (shorter than "
                    f"the shortest prompt), got {self.prefix_len!r}"
                )
        if self.range_ratio is not None and self.lengths_file is not None:
            raise ValueError("Workload: give range_ratio or lengths_file, not both")
        if self.prefix_groups is not None and self.lengths_file is not None:
            raise ValueError("Workload: a shared prefix needs fixed or range_ratio lengths")
        if self.turns is not None and self.endpoint != "chat":
            raise ValueError(
                "Workload.turns: multi-turn sessions send the history as chat messages; "
                f"use endpoint='chat' (got {self.endpoint!r})"
            )
        if self.answer_lengths and self.dataset is None:
            raise ValueError("Workload.answer_lengths takes the lengths from a dataset: give one")
        names = ("range_ratio", "lengths_file", "prefix_groups")
        other = [name for name in names if getattr(self, name) is not None]
        if other and (self.dataset is not None or self.turns is not None):
            what = "a dataset" if self.dataset is not None else "multi-turn sessions"
            raise ValueError(
                f"Workload: {what} cannot be combined with {', '.join(other)} (the prompts "
                "and their lengths come from the sessions or the dataset)"
            )
        if self.lengths_file is not None:
            datasets.length_pairs(self.lengths_file)  # read and checked now, not mid-run
        if self.dataset is not None and not _REBUILDING.get():
            self.entry("", 0)  # read and checked now, not mid-run
        object.__setattr__(self, "extra", _frozen_extra(self.extra))

    def session(self, index: int) -> tuple[int, int]:
        """Return request ``index``'s (session, turn); ``(index, 0)`` without ``turns``."""
        if self.turns is None:
            return index, 0
        return divmod(index, self.turns)

    def entry(self, salt: str, index: int) -> tuple[datasets.Entry, int]:
        """Return the dataset entry request ``index`` of the run ``salt`` sends, and its turn."""
        assert self.dataset is not None
        session, turn = self.session(index)
        order = datasets.shuffled_entries(
            self.dataset, self.input_len, self.turns, self.endpoint == "chat", self.seed, salt
        )
        entry = order[session % len(order)]
        return entry, entry.single if self.turns is None else turn

    def for_concurrency(self, concurrency: int) -> Workload:
        """Return the workload a run at ``concurrency`` sends (``requests_per_slot`` applied)."""
        if self.requests_per_slot is None:
            return self
        wanted = max(self.requests, self.requests_per_slot * concurrency)
        return dataclasses.replace(self, requests=wanted, requests_per_slot=None)

    def lengths(self, salt: str, index: int) -> tuple[int, int]:
        """Return request ``index``'s (input, output) token counts in the run ``salt``."""
        if self.dataset is not None:
            entry, turn = self.entry(salt, index)
            answered = entry.turns[turn].output_estimate() if self.answer_lengths else None
            return entry.prompt_estimate(turn), min(self.output_len, answered or self.output_len)
        if self.turns is not None:
            turn = self.session(index)[1]
            return (turn + 1) * self.input_len + turn * self.output_len, self.output_len
        if self.range_ratio is None and self.lengths_file is None:  # fixed: no generator to seed
            return self.input_len, self.output_len
        rng = random.Random(f"{self.seed}/{salt}/lengths/{index}")
        if self.lengths_file is not None:
            pair_in, pair_out = rng.choice(datasets.length_pairs(self.lengths_file))
            return min(pair_in, self.input_len), min(pair_out, self.output_len)
        ratio = self.range_ratio or 1.0
        low_in, low_out = (max(1, int(n * ratio)) for n in (self.input_len, self.output_len))
        return rng.randint(low_in, self.input_len), rng.randint(low_out, self.output_len)

    def expected_cache_hit_ratio(self) -> float:
        """Return the prefix-cache hit ratio the shared-prefix construction implies.

        Every request but each group's first finds its group's prefix cached:
        ``(requests - groups) / requests * prefix_len / input_len`` (0 without a shared
        prefix). Requests of one group sent together before the first is prefilled miss too:
        keep the concurrency below ``prefix_groups`` to see exactly this.
        """
        if self.turns is not None and self.dataset is None:
            # Turn t's prompt holds the previous turn's prompt, all of it cached (counted
            # in words, without the chat template's).
            prompts = [self.lengths("", i)[0] for i in range(self.requests)]
            cached = [prompts[i - 1] for i in range(self.requests) if self.session(i)[1]]
            return sum(cached) / sum(prompts)
        if not self.prefix_groups:
            return 0.0
        groups = min(self.prefix_groups, self.requests)
        return (self.requests - groups) / self.requests * self.prefix_len / self.input_len

    def warmup_for(self, concurrency: int) -> int:
        """Return the warm-up request count for a run at ``concurrency`` requests in flight."""
        if self.warmup is not None:
            return self.warmup
        return min(max(concurrency, 1), DEFAULT_WARMUP_CAP)

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types; the optional fields only when set (older keys stay)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data.update(temperature=float(self.temperature), extra=copy.deepcopy(dict(self.extra)))
        return {k: v for k, v in data.items() if k not in _OPTIONAL or v not in (None, False)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Workload:
        """Rebuild a workload from :meth:`as_dict` output (its dataset file is read when sent)."""
        token = _REBUILDING.set(True)
        try:
            return cls(**dict(data))
        finally:
            _REBUILDING.reset(token)

    def key(self) -> str:
        """Return a stable text key (canonical JSON, with a dataset file's SHA-256)."""
        data = self.as_dict()
        if self.dataset is not None:
            data["dataset_sha256"] = datasets.digest(self.dataset)
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def __reduce__(self) -> tuple[Any, tuple[dict[str, Any]]]:
        # ``extra`` is a read-only mapping, which pickle refuses: a workload travels to and
        # from load workers (processes, Ray actors) as its plain-JSON form.
        return _rebuilt, (self.as_dict(),)


#: Fields :meth:`Workload.as_dict` writes only when set (``prefix_len`` is 0, ``== False``,
#: without ``prefix_groups``).
_OPTIONAL = ("requests_per_slot", "vocab_size", "prefix_groups", "prefix_len", "range_ratio",
             "lengths_file", "dataset", "answer_lengths", "turns")  # fmt: skip

_EXAMPLE = "; e.g. Workload(input_len=1024, output_len=256, requests=64)"

#: The integer fields: name, smallest value allowed, what ``None`` means (``None``: not
#: allowed), and an example for the message.
_INTEGERS: tuple[tuple[str, int | None, str | None, str], ...] = (
    ("input_len", 1, None, _EXAMPLE),
    ("output_len", 1, None, _EXAMPLE),
    ("requests", 1, None, _EXAMPLE),
    ("warmup", 0, "automatic", ""),
    ("seed", None, None, ""),
    ("requests_per_slot", 1, "", "; e.g. requests_per_slot=4"),
    ("vocab_size", 2, "unknown: ids every tokenizer has",
     "; the served model's vocabulary size, e.g. vocab_size=sglang_server.vocab_size"),
    ("turns", 1, "", "; e.g. Workload(..., endpoint='chat', turns=4)"),
)  # fmt: skip


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: The other fields' checks: name, what is allowed (for the message), and the check.
_RULES: tuple[tuple[str, str, Callable[[Any], bool]], ...] = (
    ("stream", "True or False", lambda v: isinstance(v, bool)),
    ("answer_lengths", "True or False", lambda v: isinstance(v, bool)),
    ("endpoint", f"one of {', '.join(map(repr, ENDPOINTS))}", lambda v: v in ENDPOINTS),
    ("temperature", "a finite number >= 0", lambda v: _is_number(v) and v >= 0),
    ("range_ratio", "in (0, 1]; e.g. 0.5 draws lengths from half to all of input_len and "
     "output_len", lambda v: v is None or (_is_number(v) and 0 < v <= 1)),
    ("dataset", "None or a file path (str), e.g. dataset=str(path)",
     lambda v: v is None or isinstance(v, str)),
    ("extra", "a mapping of request fields", lambda v: isinstance(v, Mapping)),
)  # fmt: skip


def _rebuilt(data: dict[str, Any]) -> Workload:
    # A module-level function: pickled by reference (a bound classmethod is not, by Ray).
    return Workload.from_dict(data)


def _frozen_extra(extra: Mapping[str, Any]) -> Mapping[str, Any]:
    try:
        # A JSON round trip checks that the body can be sent and takes a private deep copy,
        # so mutating the caller's dict later cannot change a frozen workload.
        copied = json.loads(json.dumps(dict(extra), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"Workload.extra must hold JSON values only (it is sent in every request body): {exc}"
        ) from None
    nested = copied.get("sampling_params", {})
    if not isinstance(nested, dict):
        raise ValueError("Workload.extra['sampling_params'] must be a mapping")
    clash = sorted(_RESERVED_FIELDS & (set(copied) | set(nested)))
    if clash:
        raise ValueError(
            f"Workload.extra must not set {', '.join(clash)}: these define the workload; use "
            f"Workload(input_len=..., output_len=..., temperature=..., stream=...) instead"
        )
    return MappingProxyType(copied)
