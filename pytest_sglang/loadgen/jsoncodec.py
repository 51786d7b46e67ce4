"""JSON for the hot path: orjson when installed, the standard library otherwise.

Parsing one small JSON event per generated token is most of what the load generator does
per chunk; orjson parses them several times faster than :mod:`json`. It is optional: the
results are the same either way, only the client's CPU cost differs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

__all__ = ["BACKEND", "dumps", "loads"]

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
