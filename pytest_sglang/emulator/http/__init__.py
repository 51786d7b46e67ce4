"""The emulator's HTTP surface: the Starlette app, its endpoints and middleware."""

from __future__ import annotations
