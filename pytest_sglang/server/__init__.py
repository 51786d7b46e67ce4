"""Servers under test: the handle tests receive, the readiness gate, the session pool."""

from __future__ import annotations
