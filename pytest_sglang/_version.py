"""The plugin's version, from the installed distribution's metadata (imports nothing of ours)."""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version


@functools.cache
def plugin_version() -> str:
    """Return the installed version of pytest-sglang (``0+unknown`` from a bare source tree)."""
    try:
        return version("pytest-sglang")
    except PackageNotFoundError:
        return "0+unknown"
