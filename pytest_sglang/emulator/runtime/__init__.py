"""The emulator's runtime: the context routes share, state, logs, signals and startup phases."""

from __future__ import annotations
