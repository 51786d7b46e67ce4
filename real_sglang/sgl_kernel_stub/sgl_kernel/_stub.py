"""Helpers of the sgl_kernel stand-in: the not-implemented callables and the call log."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NoReturn

#: When set, every process that imports the stand-in appends ``IMPORT <pid>``, and every
#: call appends ``CALL <name> <pid>`` (before raising), to this file. real_sglang/smoke.py
#: sets it to check that the server's processes imported the stand-in and never called it.
LOG_ENV = "PYTEST_SGLANG_SGL_KERNEL_LOG"

#: Names of the stand-ins called in this process (each call, in order).
CALLS: list[str] = []


def record(event: str) -> None:
    """Append ``event`` and this process's pid to the call log, if one is set."""
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{event} {os.getpid()}\n")


def not_implemented(qualname: str) -> Callable[..., NoReturn]:
    """Return a callable named ``qualname`` that raises NotImplementedError when called."""
    name = qualname.rsplit(".", 1)[-1]

    def stand_in(*args: Any, **kwargs: Any) -> NoReturn:
        CALLS.append(qualname)
        record(f"CALL {qualname}")
        raise NotImplementedError(
            f"{qualname} was called, but this sgl_kernel is pytest-sglang's import-time "
            "stand-in (real_sglang/sgl_kernel_stub): the real kernel has no CPU build on "
            "PyPI. This code path cannot run in the real-SGLang CPU tier."
        )

    stand_in.__name__ = name
    stand_in.__qualname__ = name
    stand_in.__module__ = qualname.rsplit(".", 1)[0]
    stand_in.__doc__ = f"Stand-in for {qualname}: raises NotImplementedError when called."
    return stand_in
