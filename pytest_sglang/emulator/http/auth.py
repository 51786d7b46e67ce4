"""The ``--api-key`` check, as SGLang's ``add_api_key_middleware`` does it.

Every path needs ``Authorization: Bearer <key>`` except those starting with ``/health`` or
``/metrics``, ``/ready`` (0.5.23) and any ``OPTIONS`` request. 0.5.23 compares the scheme
case-insensitively; 0.5.5 compares the whole header as a string. Failures answer 401
``{"error":"Unauthorized"}``.
"""

from __future__ import annotations

import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from pytest_sglang.emulator.http.web import json_response


class ApiKeyMiddleware:
    """Pure ASGI middleware (streaming responses pass through untouched)."""

    def __init__(self, app: ASGIApp, api_key: str, case_insensitive_scheme: bool) -> None:
        self.app = app
        self.api_key = api_key
        self.case_insensitive_scheme = case_insensitive_scheme

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass authorised and exempt requests on; answer 401 to the rest."""
        if scope["type"] != "http" or self._exempt(scope) or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        await json_response({"error": "Unauthorized"}, 401)(scope, receive, send)

    def _exempt(self, scope: Scope) -> bool:
        path = str(scope.get("path", ""))
        if scope.get("method") == "OPTIONS":
            return True
        if path.startswith(("/health", "/metrics")):
            return True
        return self.case_insensitive_scheme and path == "/ready"

    def _authorized(self, scope: Scope) -> bool:
        header = Headers(scope=scope).get("authorization")
        if header is None:
            return False
        if not self.case_insensitive_scheme:
            return hmac.compare_digest(header.encode(), f"Bearer {self.api_key}".encode())
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            token.encode(), self.api_key.encode()
        )
