"""JSON with orjson, and the bounded parse of every JSON body a server sends us.

:func:`loads_body` refuses a body too large or nested too deep, so a hostile or broken server
cannot exhaust memory or the recursion limit.
"""

from __future__ import annotations

from typing import Any

from orjson import dumps, loads

__all__ = ["BACKEND", "MAX_BODY_BYTES", "MAX_DEPTH", "UnsafeBody", "dumps", "loads", "loads_body"]

BACKEND = "orjson"
#: The largest server body parsed: far above any model list, ``/server_info`` or generation
#: (a 32k-token answer with its token ids is about 1 MB).
MAX_BODY_BYTES = 64 * 1024 * 1024
#: The deepest nesting accepted: SGLang's answers nest a few levels (``/server_info``'s
#: ``internal_states`` about five), far below the recursion limit of what walks them.
MAX_DEPTH = 64


class UnsafeBody(ValueError):
    """A server's JSON body is too large or nested too deep to be parsed safely."""


def loads_body(body: bytes) -> Any:
    """Parse a server's JSON body; :class:`UnsafeBody` over ``MAX_BODY_BYTES`` or ``MAX_DEPTH``.

    Anything else that is not JSON raises a plain :class:`ValueError`.
    """
    if len(body) > MAX_BODY_BYTES:
        raise UnsafeBody(f"a JSON body of {len(body)} bytes, more than {MAX_BODY_BYTES}")
    try:
        value = loads(body)
    except ValueError as exc:
        if "ecursion" in str(exc) or "depth" in str(exc):  # orjson stops at depth 1024
            raise UnsafeBody(f"JSON nested deeper than {MAX_DEPTH} levels") from None
        raise
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return value  # too few brackets to nest deeper (the common case, at C speed)
    # Iteratively, level by level: a recursive walk would meet the limit it guards against.
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(MAX_DEPTH):
        level = [
            child
            for node in level
            for child in (node.values() if isinstance(node, dict) else node)
            if isinstance(child, dict | list)
        ]
        if not level:
            return value
    raise UnsafeBody(f"JSON nested deeper than {MAX_DEPTH} levels")
