"""Errors the runtime raises for the HTTP layer to answer (it turns them into responses)."""

from __future__ import annotations

__all__ = ["RequestError"]


class RequestError(ValueError):
    """A request SGLang rejects with a ValueError (400 unless ``status_code`` says otherwise)."""

    status_code = 400
