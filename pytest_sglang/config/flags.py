"""The one reader of SGLang launch flags: ``--flag value ...`` and ``--flag=value``."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["split_flags"]


def split_flags(argv: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Group ``argv`` into (flag, values): a flag's values run to the next ``--`` token.

    ``--flag=value`` becomes (flag, [value]); a leading token that is no flag forms a group.
    """
    groups: list[tuple[str, list[str]]] = []
    for token in argv:
        if token.startswith("--") or not groups:
            flag, eq, value = token.partition("=")
            groups.append((flag, [value] if eq else []))
        else:
            groups[-1][1].append(token)
    return groups
