"""JSON for the hot path, and the bounded parse of every JSON body a server sends us.

orjson, when installed, parses the per-token events several times faster than :mod:`json`
(same results). :func:`loads_body` refuses a body too large or nested too deep, so a
hostile or broken server cannot exhaust memory or the recursion limit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["BACKEND", "MAX_BODY_BYTES", "MAX_DEPTH", "UnsafeBody", "dumps", "loads", "loads_body"]

#: The largest server body parsed: far above any model list, ``/server_info`` or generation
#: (a 32k-token answer with its token ids is about 1 MB).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: The deepest nesting accepted: SGLang's answers nest a few levels (``/server_info``'s
#: ``internal_states`` about five), far below the recursion limit of what walks them.
MAX_DEPTH = 64

loads: Callable[[bytes], Any]
dumps: Callable[[Any], bytes]

try:
    import orjson
except ImportError:  # pragma: no cover - exercised only where orjson is missing
    BACKEND = "json"
    loads = json.loads

    def dumps(value: Any) -> bytes:
        """Serialise ``value`` to compact UTF-8 JSON."""
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

else:
    BACKEND = "orjson"
    loads = orjson.loads
    dumps = orjson.dumps


class UnsafeBody(ValueError):
    """A server's JSON body is too large or nested too deep to be parsed safely."""


def loads_body(body: bytes) -> Any:
    """Parse a server's JSON body, refusing one over ``MAX_BODY_BYTES`` or ``MAX_DEPTH``.

    :raises UnsafeBody: too large or too deep (its message says which, and the limit).
    :raises ValueError: not JSON.
    """
    if len(body) > MAX_BODY_BYTES:
        raise UnsafeBody(f"a JSON body of {len(body)} bytes, more than {MAX_BODY_BYTES}")
    try:
        value = loads(body)
    except RecursionError:  # the json fallback; orjson stops at depth 1024 by itself
        raise UnsafeBody(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        if "depth" in str(exc) or "ecursion" in str(exc):  # orjson: "depth limit exceeded"
            raise UnsafeBody(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        raise
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return value  # too few brackets to nest deeper (the common case, at C speed)
    # Iteratively, level by level: a recursive walk would meet the limit it guards against.
    containers = (dict, list)
    level: list[Any] = [value] if isinstance(value, containers) else []
    for _ in range(MAX_DEPTH):
        nested = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, containers)
        ]
        if not nested:
            return value
        level = nested
    raise UnsafeBody(f"JSON nested deeper than {MAX_DEPTH} levels")
