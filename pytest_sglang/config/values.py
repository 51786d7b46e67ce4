"""Resolved setting values: where each came from, attached servers, identity expectations."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["NAME_RE", "Expectation", "Header", "ServerUrl", "Shard", "Sourced"]

T = TypeVar("T")

#: What can name a server: letters, digits, ``_``, ``.``, ``-``.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A resolved setting and a human description of where it came from."""

    value: T
    source: str
    #: The value is a secret (the API key): its repr never shows it.
    secret: bool = field(default=False, compare=False, repr=False)

    def __repr__(self) -> str:
        shown = "'***'" if self.secret and self.value else repr(self.value)
        return f"Sourced(value={shown}, source={self.source!r})"


@dataclass(frozen=True)
class ServerUrl:
    """An attached server: its name, base URL (no trailing slash) and the value's source."""

    name: str
    url: str
    source: str
    #: ``sglang``, or ``openai`` for a plain OpenAI-compatible server (``openai+http://``).
    kind: str = "sglang"


@dataclass(frozen=True)
class Shard:
    """One shard of a split suite (``--sglang-shard K/N``): ``index`` (from 1) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class Header:
    """One HTTP header for ``server`` (or every server), ``--sglang-header``; its value secret."""

    name: str
    value: str = field(repr=False)
    source: str
    server: str | None = None

    def describe(self) -> str:
        """Return the header as the user wrote it, value masked: ``vllm:Authorization=***``."""
        prefix = f"{self.server}:" if self.server else ""
        return f"{prefix}{self.name}=***"


@dataclass(frozen=True)
class Expectation:
    """One identity expectation: ``key`` must equal ``value`` on server ``server`` (or all)."""

    key: str
    value: object
    source: str
    server: str | None = None

    def describe(self) -> str:
        """Return the expectation as the user wrote it, e.g. ``eagle3:tp_size=8``."""
        prefix = f"{self.server}:" if self.server else ""
        return f"{prefix}{self.key}={json.dumps(self.value)}"
