"""Verdicts: rank statistics, planning, decisions, assertions, speculative decoding."""

from __future__ import annotations
