"""HTTP helpers shared by the routes: JSON bodies, SSE, SGLang's error shapes.

Bodies are compact JSON, as SGLang's ORJSONResponse writes them. Three error shapes exist in
SGLang and clients tell them apart, so each has its helper:

- native ValueError (e.g. an over-long input): 400 ``{"error": {"message": ...}}``;
- native body contract violation (0.5.23): 400 ``{"error": "<text>"}``;
- OpenAI-style and request-validation errors: 400
  ``{"object": "error", "message", "type", "param": null, "code"}``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

SSE_DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Cache-Control": "no-cache"}


class ContractError(ValueError):
    """A native request body whose shape breaks ``GenerateReqInput``'s contract."""


class BodyError(ValueError):
    """A body that is not JSON (FastAPI's request-validation error, answered with 400)."""


def dumps(obj: Any) -> bytes:
    """Compact UTF-8 JSON."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def json_response(obj: Any, status_code: int = 200) -> Response:
    """Return an ``application/json`` response."""
    return Response(dumps(obj), status_code=status_code, media_type="application/json")


def empty_response(status_code: int) -> Response:
    """Return a response with an empty body and no content type (SGLang's health answers)."""
    return Response(b"", status_code=status_code)


def sse_event(obj: Any) -> bytes:
    """One server-sent event carrying ``obj`` as JSON."""
    return b"data: " + dumps(obj) + b"\n\n"


def sse_response(events: AsyncIterator[bytes]) -> StreamingResponse:
    """Return a ``text/event-stream`` response."""
    return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)


def native_error(message: str, status_code: int = 400) -> Response:
    """Return the native ValueError answer."""
    return json_response({"error": {"message": message}}, status_code)


def openai_error_body(
    message: str, err_type: str = "BadRequest", code: int = 400
) -> dict[str, Any]:
    """SGLang's ``ErrorResponse`` envelope."""
    return {"object": "error", "message": message, "type": err_type, "param": None, "code": code}


def openai_error(message: str, err_type: str = "BadRequest", code: int = 400) -> Response:
    """Return an ``ErrorResponse`` with status ``code``."""
    return json_response(openai_error_body(message, err_type, code), code)


def validation_error(message: str) -> Response:
    """SGLang's answer to FastAPI request-validation errors: 400, not 422."""
    return openai_error(message, err_type="Bad Request", code=400)


async def read_json(request: Request) -> Any:
    """Return the parsed JSON body.

    :raises BodyError: with FastAPI's error text when the body is not JSON.
    """
    raw = await request.body()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        position = getattr(exc, "pos", 0)
        reason = getattr(exc, "msg", str(exc))
        raise BodyError(
            f"[{{'type': 'json_invalid', 'loc': ('body', {position}), 'msg': 'JSON decode "
            f"error', 'input': {{}}, 'ctx': {{'error': '{reason}'}}}}]"
        ) from None


def missing_field(model: str, field: str, body: Any) -> str:
    """Pydantic's text for a missing required field."""
    return (
        f"1 validation error for {model}\n{field}\n  Field required [type=missing, "
        f"input_value={_short(body)}, input_type={type(body).__name__}]"
    )


def invalid_field(model: str, field: str, expected: str, value: Any) -> str:
    """Pydantic's text for a field of the wrong type."""
    return (
        f"1 validation error for {model}\n{field}\n  Input should be {expected} "
        f"[type=invalid_type, input_value={_short(value)}, input_type={type(value).__name__}]"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
