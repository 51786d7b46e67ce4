"""The load generator: workloads in, one record per request out.

Its modules, one job each, are listed in ``docs/architecture.md`` ("Where new code goes").
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
    # Not cached in globals(): pytester swaps sys.modules after each in-process run, and a
    # cached name would stay bound to a discarded module.
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
