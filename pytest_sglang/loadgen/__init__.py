"""The load generator: workloads in, one record per request out.

Modules, one job each:

- ``schedule``: how requests arrive, one type (``ClosedLoop``: C slots;
  ``OpenLoop``: an arrival schedule), pure;
- ``runner``: :class:`LoadGenerator` and its run loop, the only one (``LoadGenerator.run``),
  with the closed-loop, open-loop and sweep forms and their blocking facade;
- ``runstate``: what one run's requests share (clients, the unanswered streak);
- ``transport``: one request on the wire (httpx on aiohttp, send-time stamp, failures named);
- ``records``: :class:`RequestRecord` and :class:`LoadRun`, the plain data it produces;
- ``streams``: parsers for the three endpoints' responses (pure);
- ``sse``: server-sent events framing (pure);
- ``prompts``: request bodies of exact lengths (pure, deterministic);
- ``progress``: the progress callback and its ticker;
- ``habits``: a server's connection habits, learned once per server and session;
- ``watchdog``: the stall watchdog (ends streams silent after their first token);
- ``saturation``: the client's own CPU and event-loop lag per run (``client_bound``);
- ``placement``: where a run goes (this process, N processes, Ray actors); ``shard``,
  ``workers``, ``relay``, ``ray_workers``, ``ray_pools``: the same run loop on several
  workers (C in flight in total, one merged record set; ``docs/scaling.md``);
- ``jsoncodec``: orjson when installed, :mod:`json` otherwise.

Public names load lazily: the records and parsers do not need httpx, and importing them must
not pull it in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sglang.loadgen.progress import ProgressCallback, no_progress
    from pytest_sglang.loadgen.records import LoadRun, RequestRecord
    from pytest_sglang.loadgen.runner import LoadGenerator

__all__ = ["LoadGenerator", "LoadRun", "ProgressCallback", "RequestRecord", "no_progress"]

_LAZY = {
    "LoadGenerator": "pytest_sglang.loadgen.runner",
    "LoadRun": "pytest_sglang.loadgen.records",
    "RequestRecord": "pytest_sglang.loadgen.records",
    "ProgressCallback": "pytest_sglang.loadgen.progress",
    "no_progress": "pytest_sglang.loadgen.progress",
}


def __getattr__(name: str) -> Any:
    """Import public names on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_sglang.loadgen' has no attribute {name!r}")
    # Not cached in globals(): resolved through sys.modules every time, so that code which
    # swaps modules out (pytester restores sys.modules after each in-process run) never
    # gets a function bound to a discarded module, recording into a discarded context.
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
