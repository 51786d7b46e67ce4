"""The plugin's version, from the installed distribution's metadata (imports nothing of ours)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version

__all__ = ["plugin_version"]

DISTRIBUTION = "pytest-sglang"


@functools.cache
def plugin_version() -> str:
    """Return the installed version of pytest-sglang (``0+unknown`` from a bare source tree)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # running from a source tree without installation
        return "0+unknown"
