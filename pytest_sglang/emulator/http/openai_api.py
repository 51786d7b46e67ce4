"""``POST /v1/completions`` and ``POST /v1/chat/completions``, shaped as SGLang 0.5.23 serves them.

SGLang specifics reproduced: the ``model`` field is echoed, not validated (default
``"default"``); ids are 32 hex characters without prefix; ``matched_stop``,
``reasoning_content`` and ``usage.reasoning_tokens`` are always present; the usage chunk comes
only with ``stream_options.include_usage`` (or ``--stream-response-default-include-usage``),
serialised without nulls for completions and with them for chat; chat streams open with a
role chunk and close with a separate finish chunk; a non-JSON content type or an invalid body
answers 400 (never 422) with the ``{"object": "error", ...}`` envelope, and so does a request that
does not fit the context, streamed or not; non-streamed responses carry ``metadata`` with the
weight version and (0.5.23) ``weight_versions``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pytest_sglang.emulator.engine.engine import GenerationRequest
from pytest_sglang.emulator.engine.tracking import RequestRun, merged
from pytest_sglang.emulator.http.web import (
    SSE_DONE,
    BodyError,
    invalid_field,
    json_response,
    missing_field,
    openai_error,
    read_json,
    sse_event,
    sse_response,
    validation_error,
)
from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.crash import die_of_unknown_token, out_of_vocabulary
from pytest_sglang.emulator.runtime.errors import RequestError

COMPLETION_MODEL = "CompletionRequest"
CHAT_MODEL = "ChatCompletionRequest"
UNSUPPORTED_MEDIA_TYPE = "Unsupported Media Type: Only 'application/json' is allowed"


class _Invalid(ValueError):
    """A body that fails the request model's validation (answered 400 "Bad Request")."""


@dataclass(frozen=True)
class OpenAIRequest:
    """What both endpoints need from a parsed body."""

    model: str
    prompts: list[list[int]]
    max_tokens: int | None
    n: int
    temperature: float
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool

    def generation_requests(self) -> list[GenerationRequest]:
        """One generation per prompt and choice, in choice-index order."""
        return [
            GenerationRequest(
                rid=uuid.uuid4().hex,
                input_ids=ids,
                max_new_tokens=self.max_tokens,
                ignore_eos=self.ignore_eos,
                temperature=self.temperature,
            )
            for ids in self.prompts
            for _ in range(self.n)
        ]


Parser = Callable[[EmulatorContext, Any], OpenAIRequest]
Answerer = Callable[[EmulatorContext, OpenAIRequest, list[RequestRun]], dict[str, Any]]
Streamer = Callable[[EmulatorContext, OpenAIRequest, list[RequestRun]], AsyncGenerator[bytes, None]]
Handler = Callable[[Request], Awaitable[Response]]


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """Return the two OpenAI generation routes."""

    def endpoint(parse: Parser, answer: Answerer, stream: Streamer) -> Handler:
        async def handle(request: Request) -> Response:
            media_type = request.headers.get("content-type", "").split(";", 1)[0].strip()
            if media_type.lower() != "application/json":
                return validation_error(UNSUPPORTED_MEDIA_TYPE)
            try:
                parsed = parse(ctx, await read_json(request))
            except (BodyError, _Invalid) as exc:
                return validation_error(str(exc))
            except RequestError as exc:
                return openai_error(str(exc))
            items = parsed.generation_requests()
            # Unlike native /generate, the OpenAI layer checks lengths before it streams:
            # an over-context request gets a 400 body, stream or not (seen on 0.5.23).
            try:
                _check(ctx, items)
            except RequestError as exc:
                return openai_error(str(exc))
            bad = out_of_vocabulary(ctx, parsed.prompts)
            if bad is not None:
                if parsed.stream:
                    return sse_response(_dying(ctx, bad))
                await die_of_unknown_token(ctx, bad)
            if parsed.stream:
                runs = [ctx.run(item, streaming=True) for item in items]
                return sse_response(stream(ctx, parsed, runs))
            runs = [ctx.run(item, streaming=False) for item in items]
            await asyncio.gather(*(run.run_to_end() for run in runs))
            return json_response(answer(ctx, parsed, runs))

        return handle

    return [
        Route(
            "/v1/completions",
            endpoint(parse_completion, completion_response, completion_stream),
            methods=["POST"],
        ),
        Route(
            "/v1/chat/completions",
            endpoint(parse_chat, chat_response, chat_stream),
            methods=["POST"],
        ),
    ]


async def _dying(ctx: EmulatorContext, token_id: int) -> AsyncGenerator[bytes, None]:
    # The streaming response has started (200, headers); then the server dies.
    await die_of_unknown_token(ctx, token_id)
    yield b""  # pragma: no cover - the process is dead by now


def _check(ctx: EmulatorContext, items: Sequence[GenerationRequest]) -> None:
    for item in items:
        ctx.check_lengths(len(item.input_ids), item.max_new_tokens)


# --- parsing -------------------------------------------------------------------------------


def parse_completion(ctx: EmulatorContext, body: Any) -> OpenAIRequest:
    """Parse a ``CompletionRequest``."""
    _require_object(COMPLETION_MODEL, body)
    if "prompt" not in body:
        raise _Invalid(missing_field(COMPLETION_MODEL, "prompt", body))
    prompt = body["prompt"]
    prompts: list[list[int]]
    if isinstance(prompt, str):
        prompts = [ctx.tokenizer.encode(prompt)]
    elif _is_ids(prompt):
        prompts = [list(prompt)]
    elif isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        prompts = [ctx.tokenizer.encode(p) for p in prompt]
    elif isinstance(prompt, list) and prompt and all(_is_ids(p) for p in prompt):
        prompts = [list(p) for p in prompt]
    else:
        raise _Invalid(invalid_field(COMPLETION_MODEL, "prompt", "a valid string or list", prompt))
    max_tokens = _optional_int(COMPLETION_MODEL, body, "max_tokens", 16)
    return _common(ctx, COMPLETION_MODEL, body, prompts, max_tokens)


def parse_chat(ctx: EmulatorContext, body: Any) -> OpenAIRequest:
    """Parse a ``ChatCompletionRequest``."""
    _require_object(CHAT_MODEL, body)
    if "messages" not in body:
        raise _Invalid(missing_field(CHAT_MODEL, "messages", body))
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        raise _Invalid(invalid_field(CHAT_MODEL, "messages", "a non-empty list", messages))
    contents = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _Invalid(
                invalid_field(CHAT_MODEL, f"messages.{index}", "a message with a role", message)
            )
        contents.append(_content_text(message.get("content"), index))
    max_tokens = _optional_int(CHAT_MODEL, body, "max_completion_tokens", None)
    if max_tokens is None:
        max_tokens = _optional_int(CHAT_MODEL, body, "max_tokens", None)
    prompts = [ctx.tokenizer.chat_prompt_ids(contents)]
    return _common(ctx, CHAT_MODEL, body, prompts, max_tokens)


def _content_text(content: Any, index: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    raise _Invalid(
        invalid_field(CHAT_MODEL, f"messages.{index}.content", "a valid string or list", content)
    )


def _common(
    ctx: EmulatorContext,
    model_name: str,
    body: dict[str, Any],
    prompts: list[list[int]],
    max_tokens: int | None,
) -> OpenAIRequest:
    model = body.get("model", "default")
    if not isinstance(model, str):
        raise _Invalid(invalid_field(model_name, "model", "a valid string", model))
    if max_tokens is not None and max_tokens < 0:
        raise RequestError(f"max_new_tokens must be at least 0, got {max_tokens}.")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise _Invalid(invalid_field(model_name, "temperature", "a valid number", temperature))
    n = _optional_int(model_name, body, "n", 1)
    if n is None or n < 1:
        raise RequestError(f"n must be at least 1, got {n}.")
    stream = _bool(model_name, body, "stream")
    ignore_eos = _bool(model_name, body, "ignore_eos")
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise _Invalid(invalid_field(model_name, "stream_options", "a valid dictionary", options))
    default_usage = bool(ctx.config.server_args["stream_response_default_include_usage"])
    include_usage = options.get("include_usage")
    return OpenAIRequest(
        model=model,
        prompts=prompts,
        max_tokens=max_tokens,
        n=n,
        temperature=float(temperature),
        ignore_eos=ignore_eos,
        stream=stream,
        include_usage=default_usage if include_usage is None else include_usage is True,
        continuous_usage=options.get("continuous_usage_stats") is True,
    )


def _require_object(model_name: str, body: Any) -> None:
    if not isinstance(body, dict):
        raise _Invalid(
            f"1 validation error for {model_name}\n  Input should be a valid dictionary or "
            f"object to extract fields from [type=model_attributes_type, "
            f"input_value={body!r:.60}, input_type={type(body).__name__}]"
        )


def _optional_int(
    model_name: str, body: dict[str, Any], key: str, default: int | None
) -> int | None:
    value = body.get(key, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(invalid_field(model_name, key, "a valid integer", value))
    return value


def _bool(model_name: str, body: dict[str, Any], key: str) -> bool:
    value = body.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _Invalid(invalid_field(model_name, key, "a valid boolean", value))
    return value


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    )


# --- responses -----------------------------------------------------------------------------


def usage(
    ctx: EmulatorContext, parsed: OpenAIRequest, runs: Sequence[RequestRun]
) -> dict[str, Any]:
    """Usage with SGLang's extras; prompts count once per prompt, completions per choice."""
    prompt_tokens = sum(runs[i * parsed.n].prompt_tokens for i in range(len(parsed.prompts)))
    completion_tokens = sum(run.completion_tokens for run in runs)
    details = None
    if ctx.config.server_args["enable_cache_report"]:
        details = {"cached_tokens": sum(run.cached_tokens for run in runs)}
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": details,
        "reasoning_tokens": 0,
        "completion_tokens_details": None,
    }


def _finish(run: RequestRun) -> tuple[str | None, int | str | None]:
    if run.finish is None:
        return None, None
    return run.finish.type, run.finish.matched_stop


def _response(
    ctx: EmulatorContext,
    parsed: OpenAIRequest,
    runs: list[RequestRun],
    kind: str,
    content: Callable[[RequestRun], dict[str, Any]],
) -> dict[str, Any]:
    """Return a non-streamed response of ``kind``; ``content`` gives a choice's own fields."""
    choices = []
    for index, run in enumerate(runs):
        reason, matched = _finish(run)
        choices.append(
            {
                "index": index,
                **content(run),
                "logprobs": None,
                "finish_reason": reason,
                "matched_stop": matched,
            }
        )
    return {
        "id": runs[0].rid,
        "object": kind,
        "created": int(time.time()),
        "model": parsed.model,
        "choices": choices,
        "usage": usage(ctx, parsed, runs),
        "metadata": metadata(ctx, runs),
    }


def metadata(ctx: EmulatorContext, runs: Sequence[RequestRun]) -> dict[str, Any]:
    """``metadata``: the weight version, and (0.5.23) which version made which tokens."""
    version = ctx.config.server_args["weight_version"]
    data: dict[str, Any] = {"weight_version": version}
    if ctx.is_new:
        tokens = sum(run.completion_tokens for run in runs)
        data["weight_versions"] = [{"version": version, "start": 0, "end": tokens}]
    return data


def completion_response(
    ctx: EmulatorContext, parsed: OpenAIRequest, runs: list[RequestRun]
) -> dict[str, Any]:
    """Return a non-streamed ``text_completion``."""
    return _response(ctx, parsed, runs, "text_completion", lambda run: {"text": run.text})


async def completion_stream(
    ctx: EmulatorContext, parsed: OpenAIRequest, runs: list[RequestRun]
) -> AsyncGenerator[bytes, None]:
    """Per-chunk ``text_completion`` events, the optional usage chunk, then ``[DONE]``."""
    rid, created = runs[0].rid, int(time.time())

    def render(index: int, run: RequestRun) -> bytes:
        reason, matched = _finish(run)
        choice = {
            "index": index,
            "text": run.delta_text,
            "logprobs": None,
            "finish_reason": reason,
            "matched_stop": matched,
        }
        # Continuous usage: the full usage object, null fields included (seen on 0.5.23).
        chunk_usage = usage(ctx, parsed, runs) if parsed.continuous_usage else None
        return sse_event(_chunk(rid, "text_completion", created, parsed, [choice], chunk_usage))

    async for event in merged(runs, render):
        yield event
    if parsed.include_usage:
        # Serialised with exclude_none in SGLang: null usage fields are dropped.
        final = {
            "id": rid,
            "object": "text_completion",
            "created": created,
            "model": parsed.model,
            "choices": [],
            "usage": _compact(usage(ctx, parsed, runs)),
        }
        yield sse_event(final)
    yield SSE_DONE


def chat_response(
    ctx: EmulatorContext, parsed: OpenAIRequest, runs: list[RequestRun]
) -> dict[str, Any]:
    """Return a non-streamed ``chat.completion``."""

    def message(run: RequestRun) -> dict[str, Any]:
        return {"message": {"role": "assistant", "content": run.text, "reasoning_content": None}}

    return _response(ctx, parsed, runs, "chat.completion", message)


async def chat_stream(
    ctx: EmulatorContext, parsed: OpenAIRequest, runs: list[RequestRun]
) -> AsyncGenerator[bytes, None]:
    """Role chunk, content chunks, a separate finish chunk per choice, usage, ``[DONE]``."""
    rid, created = runs[0].rid, int(time.time())
    started: set[int] = set()
    kind = "chat.completion.chunk"

    def choice(index: int, delta: dict[str, Any], run: RequestRun | None = None) -> dict[str, Any]:
        reason, matched = (None, None) if run is None else _finish(run)
        return {
            "index": index,
            "delta": delta,
            "logprobs": None,
            "finish_reason": reason,
            "matched_stop": matched,
        }

    def render(index: int, run: RequestRun) -> list[bytes]:
        events = []
        # Continuous usage rides on the content chunks only, null fields included; the role
        # and finish chunks carry no usage key (seen on 0.5.23).
        chunk_usage = usage(ctx, parsed, runs) if parsed.continuous_usage else None
        if index not in started:
            started.add(index)
            delta = {"reasoning_content": None, "role": "assistant", "content": ""}
            events.append(_chunk(rid, kind, created, parsed, [choice(index, delta)], None))
        if run.delta_text:
            delta = {"reasoning_content": None, "content": run.delta_text}
            events.append(_chunk(rid, kind, created, parsed, [choice(index, delta)], chunk_usage))
        if run.finish is not None:
            delta = {"reasoning_content": None}
            events.append(_chunk(rid, kind, created, parsed, [choice(index, delta, run)], None))
        return [sse_event(event) for event in events]

    async for events in merged(runs, render):
        for event in events:
            yield event
    if parsed.include_usage:
        # Unlike completions, SGLang serialises this one with its null fields.
        final = {
            "id": rid,
            "object": kind,
            "created": created,
            "model": parsed.model,
            "choices": [],
            "usage": usage(ctx, parsed, runs),
        }
        yield sse_event(final)
    yield SSE_DONE


def _chunk(
    rid: str,
    kind: str,
    created: int,
    parsed: OpenAIRequest,
    choices: list[dict[str, Any]],
    chunk_usage: dict[str, Any] | None,
) -> dict[str, Any]:
    chunk: dict[str, Any] = {
        "id": rid,
        "object": kind,
        "created": created,
        "model": parsed.model,
        "choices": choices,
    }
    if kind == "text_completion":
        chunk["usage"] = chunk_usage  # null unless continuous usage stats are on
    elif chunk_usage is not None:
        chunk["usage"] = chunk_usage
    return chunk


def _compact(value: dict[str, Any]) -> dict[str, Any]:
    return {key: item for key, item in value.items() if item is not None}
