"""pytest-sglang: acceptance and performance tests of SGLang inference servers.

The public API is loaded lazily so that importing the plugin (which pytest does in every
run of an environment that has it installed) stays cheap.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sglang.errors import (
        IdentityMismatch,
        SchemaMismatch,
        ServerNotReady,
        ServerUnavailable,
        SGLangError,
    )
    from pytest_sglang.server.handle import ModelCard, ReadinessTimings, SGLangServer

try:
    __version__ = version("pytest-sglang")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0+unknown"

__all__ = [
    "IdentityMismatch",
    "ModelCard",
    "ReadinessTimings",
    "SGLangError",
    "SGLangServer",
    "SchemaMismatch",
    "ServerNotReady",
    "ServerUnavailable",
    "__version__",
]

_LAZY = {
    "IdentityMismatch": "pytest_sglang.errors",
    "SGLangError": "pytest_sglang.errors",
    "SchemaMismatch": "pytest_sglang.errors",
    "ServerNotReady": "pytest_sglang.errors",
    "ServerUnavailable": "pytest_sglang.errors",
    "ModelCard": "pytest_sglang.server.handle",
    "ReadinessTimings": "pytest_sglang.server.handle",
    "SGLangServer": "pytest_sglang.server.handle",
}


def __getattr__(name: str) -> Any:
    """Import public names on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_sglang' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
