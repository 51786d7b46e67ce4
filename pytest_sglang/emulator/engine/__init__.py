"""The emulator's engines: the performance model, continuous batching, tokens and the trace."""

from __future__ import annotations
