"""Helpers of the sgl_kernel stand-in: the call log."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any, TypeVar

#: When set, every process that imports the stand-in appends ``IMPORT <pid>``, and the first
#: call of each op in a process appends ``CALL <name> <pid>``, to this file. real_sglang/smoke.py
#: sets it to check that a plain server's processes imported the stand-in and never called it;
#: the speculative tests read it to see which ops a server reached.
LOG_ENV = "PYTEST_SGLANG_SGL_KERNEL_LOG"

#: Names of the stand-in's ops called in this process (the first call of each, in order).
CALLS: list[str] = []

F = TypeVar("F", bound=Callable[..., Any])


def record(event: str) -> None:
    """Append ``event`` and this process's pid to the call log, if one is set."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{event} {os.getpid()}\n")


def logged(qualname: str, op: F) -> F:
    """``op``, recording its first call in this process (:data:`CALLS`, the call log)."""

    @functools.wraps(op)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if qualname not in CALLS:
            CALLS.append(qualname)
            record(f"CALL {qualname}")
        return op(*args, **kwargs)

    wrapper.__module__ = qualname.rsplit(".", 1)[0]
    return wrapper  # type: ignore[return-value]
