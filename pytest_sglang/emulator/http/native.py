"""``POST /generate`` (and ``PUT``): SGLang's native generation endpoint.

Single prompts answer one object, batches (a list of texts or of id lists, or ``n > 1``) a list;
``"stream": true`` sends server-sent events with cumulative ``text``/``output_ids`` (deltas with
``--incremental-streaming-output``), ``"index"`` on batch chunks, ``e2e_latency`` and the
``spec_*`` statistics on each sequence's final chunk, then ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pytest_sglang.emulator.engine.engine import GenerationRequest
from pytest_sglang.emulator.engine.tracking import RequestRun, merged
from pytest_sglang.emulator.http.web import (
    SSE_DONE,
    BodyError,
    ContractError,
    json_response,
    native_error,
    read_json,
    sse_event,
    sse_response,
    validation_error,
)
from pytest_sglang.emulator.runtime.context import EmulatorContext
from pytest_sglang.emulator.runtime.crash import die_of_unknown_token, out_of_vocabulary
from pytest_sglang.emulator.runtime.errors import RequestError

DEFAULT_MAX_NEW_TOKENS = 128
NO_INPUT = "Either text, input_ids or input_embeds should be provided."


@dataclass(frozen=True)
class SamplingParams:
    """The sampling parameters the emulator honours (others are accepted and ignored)."""

    max_new_tokens: int | None = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 1.0
    ignore_eos: bool = False
    n: int = 1


@dataclass(frozen=True)
class NativeRequest:
    """A parsed ``/generate`` body: one generation per prompt and sample."""

    items: list[GenerationRequest]
    batch: bool
    stream: bool


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """Return the ``/generate`` route."""

    async def generate(request: Request) -> Response:
        try:
            body = await read_json(request)
        except BodyError as exc:
            return validation_error(str(exc))
        try:
            parsed = parse_generate(ctx, body)
        except ContractError as exc:
            # A body of the wrong shape fails FastAPI's request validation (GenerateReqInput):
            # 0.5.23 answers 400 with the OpenAI-style envelope (seen on the real server).
            if ctx.is_new:
                return validation_error(str(exc))
            return native_error(str(exc))
        except RequestError as exc:
            return native_error(str(exc), exc.status_code)
        bad = out_of_vocabulary(ctx, (item.input_ids for item in parsed.items))
        if bad is not None:
            if parsed.stream:
                return sse_response(_dying(ctx, bad))
            await die_of_unknown_token(ctx, bad)
        if parsed.stream:
            return sse_response(_stream(ctx, parsed))
        try:
            _check(ctx, parsed)
        except RequestError as exc:
            return native_error(str(exc), exc.status_code)
        runs = [ctx.run(item, streaming=False) for item in parsed.items]
        await asyncio.gather(*(run.run_to_end() for run in runs))
        outputs = [native_output(ctx, run) for run in runs]
        return json_response(outputs if parsed.batch else outputs[0])

    return [Route("/generate", generate, methods=["POST", "PUT"])]


async def _dying(ctx: EmulatorContext, token_id: int) -> AsyncGenerator[bytes, None]:
    # The headers go out first (the streaming response starts), then nothing ever comes.
    await die_of_unknown_token(ctx, token_id)
    yield b""  # pragma: no cover - the process is dead by now


async def _stream(ctx: EmulatorContext, parsed: NativeRequest) -> AsyncGenerator[bytes, None]:
    # SGLang validates lengths inside the stream, so the error arrives as an event after a 200.
    try:
        _check(ctx, parsed)
    except RequestError as exc:
        error: dict[str, Any] = {"message": str(exc)}
        if ctx.is_new:
            error.update(type="invalid_request_error", code=exc.status_code, retryable=False)
        yield sse_event({"error": error})
        yield SSE_DONE
        return
    runs = [ctx.run(item, streaming=True) for item in parsed.items]

    def render(index: int, run: RequestRun) -> bytes:
        output = native_output(ctx, run)
        if parsed.batch:
            output["index"] = index
        return sse_event(output)

    async for event in merged(runs, render):
        yield event
    yield SSE_DONE


def _check(ctx: EmulatorContext, parsed: NativeRequest) -> None:
    for item in parsed.items:
        ctx.check_lengths(len(item.input_ids), item.max_new_tokens)


def native_output(ctx: EmulatorContext, run: RequestRun) -> dict[str, Any]:
    """Return the native output object for ``run``'s latest update."""
    incremental = run.streaming and bool(ctx.config.server_args["incremental_streaming_output"])
    return {
        "text": run.delta_text if incremental else run.text,
        "output_ids": list(run.delta_ids if incremental else run.output_ids),
        "meta_info": meta_info(ctx, run),
    }


def meta_info(ctx: EmulatorContext, run: RequestRun) -> dict[str, Any]:
    """``meta_info`` with SGLang 0.5.23's fields, in its order (``tokenizer_manager.py``).

    Every chunk: ``id``, ``finish_reason``, ``prompt_tokens``, ``weight_version``,
    ``num_retractions``; with ``--enable-metrics`` the scheduler's times
    (``storage_prefetch_wait``, ``storage_staging_wait``, ``forward_entry_time``,
    ``prefill_finished_time`` as wall-clock timestamps, ``queue_time`` in seconds); then
    ``reasoning_tokens``, ``completion_tokens`` (cumulative), ``cached_tokens``,
    ``cached_tokens_details`` (``null`` without a prefix hit) and ``dp_rank``. The final
    chunk adds ``weight_versions``, ``e2e_latency``, the speculative statistics and, with
    metrics, ``request_received_ts``, ``first_token_latency``,
    ``api_server_dispatch_finish_ts``, ``request_finished_ts`` and ``decode_throughput``.
    ``response_sent_to_client_ts`` is stamped once: on the first streamed chunk (and repeated
    among the final chunk's times), or at the very end of a non-streamed answer.
    """
    args = ctx.config.server_args
    new = ctx.is_new
    metrics = new and bool(args["enable_metrics"])
    finished = run.finish is not None
    meta: dict[str, Any] = {
        "id": run.rid,
        "finish_reason": None if run.finish is None else run.finish.to_json(),
        "prompt_tokens": run.prompt_tokens,
        "weight_version": args["weight_version"],
    }
    if not new:
        meta["total_retractions"] = 0
        meta["completion_tokens"] = run.completion_tokens
        meta["cached_tokens"] = run.cached_tokens
        if finished:
            meta["e2e_latency"] = run.e2e_latency
            if ctx.spec is not None:
                meta.update(spec_meta(ctx, run))
        return meta
    meta["num_retractions"] = 0
    times = run.times
    if metrics and times is not None:
        meta.update(
            storage_prefetch_wait=0.0,
            storage_staging_wait=0.0,
            forward_entry_time=run.wall_of_monotonic(times.forward_entry),
            prefill_finished_time=run.wall_of_monotonic(times.prefill_finished),
            queue_time=times.forward_entry - times.queued,
        )
    meta["reasoning_tokens"] = 0
    meta["completion_tokens"] = run.completion_tokens
    meta["cached_tokens"] = run.cached_tokens
    if finished:
        meta["weight_versions"] = [
            {"version": args["weight_version"], "start": 0, "end": run.completion_tokens}
        ]
    meta["cached_tokens_details"] = (
        {"device": run.cached_tokens, "host": 0} if run.cached_tokens else None
    )
    meta["dp_rank"] = None
    first_streamed = run.streaming and run.updates_sent == 1
    sent_before = run.sent_ts is not None and not first_streamed
    if finished:
        meta["e2e_latency"] = run.e2e_latency
        if ctx.spec is not None:
            meta.update(spec_meta(ctx, run))
        if metrics:
            meta["request_received_ts"] = run.received_ts
            if run.first_token_at is not None:
                meta["first_token_latency"] = run.first_token_at - run.created
            meta["api_server_dispatch_finish_ts"] = run.dispatched_ts or run.received_ts
            if sent_before:
                meta["response_sent_to_client_ts"] = run.sent_ts
            if run.finished_at is not None:
                meta["request_finished_ts"] = run.wall(run.finished_at)
            tokens = run.completion_tokens
            if run.first_token_at is not None and run.finished_at is not None and tokens > 1:
                decode = run.finished_at - run.first_token_at
                if decode > 0:
                    meta["decode_throughput"] = (tokens - 1) / decode
    if first_streamed or (finished and not sent_before):
        meta["response_sent_to_client_ts"] = run.mark_sent()
    return meta


def spec_meta(ctx: EmulatorContext, run: RequestRun) -> dict[str, Any]:
    """Return the final chunk's speculative ``meta_info`` statistics, per emulated version."""
    assert ctx.spec is not None
    verify = run.verify_ct
    length = run.completion_tokens / verify if verify else 0.0
    if ctx.is_new:
        if not verify:
            return {}
        proposed = verify * (ctx.spec.num_draft_tokens - 1)
        return {
            "spec_accept_rate": run.correct_drafts / proposed if proposed else 0.0,
            "spec_accept_length": length,
            "spec_num_correct_drafts": run.correct_drafts,
            "spec_num_proposed_drafts": proposed,
            "spec_verify_ct": verify,
            # Only when the histogram has counts (tokenizer_manager.py).
            **(
                {"spec_correct_drafts_histogram": list(run.accept_histogram)}
                if any(run.accept_histogram)
                else {}
            ),
        }
    drafted = verify * ctx.spec.num_steps
    meta: dict[str, Any] = {
        "spec_accept_rate": run.correct_drafts / drafted if drafted else 0.0,
        "spec_accept_length": length,
        "spec_verify_ct": verify,
    }
    if verify:
        meta["spec_accept_token_num"] = run.correct_drafts
        meta["spec_draft_token_num"] = drafted
    return meta


def parse_generate(ctx: EmulatorContext, body: Any) -> NativeRequest:
    """Parse a ``GenerateReqInput`` body.

    :raises ContractError: for a body of the wrong shape.
    :raises RequestError: for values SGLang rejects with a ValueError.
    """
    if not isinstance(body, dict):
        raise ContractError("body: expected an object (GenerateReqInput)")
    text, input_ids = body.get("text"), body.get("input_ids")
    if (text is None) == (input_ids is None):
        raise RequestError(NO_INPUT)
    prompts: list[list[int]]
    if text is not None:
        if isinstance(text, str):
            prompts, batch = [ctx.tokenizer.encode(text)], False
        elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            prompts, batch = [ctx.tokenizer.encode(t) for t in text], True
        else:
            raise ContractError("text: expected a string or a non-empty array of strings")
    elif _is_ids(input_ids):
        prompts, batch = [list(cast(list[int], input_ids))], False
    elif isinstance(input_ids, list) and input_ids and all(_is_ids(ids) for ids in input_ids):
        prompts, batch = [list(ids) for ids in input_ids], True
    else:
        raise ContractError(
            "input_ids: expected a non-empty array of integers or an array of such arrays"
        )
    params = [parse_sampling(raw) for raw in _per_prompt(body.get("sampling_params"), prompts)]
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ContractError("stream: expected a boolean")
    log_metrics = body.get("log_metrics", True) is not False
    rids = body.get("rid")
    items = [
        GenerationRequest(
            rid=_rid(rids, index, sampling.n),
            input_ids=ids,
            max_new_tokens=sampling.max_new_tokens,
            ignore_eos=sampling.ignore_eos,
            temperature=sampling.temperature,
            log_metrics=log_metrics,
        )
        for index, (ids, sampling) in enumerate(zip(prompts, params, strict=True))
        for _ in range(sampling.n)
    ]
    return NativeRequest(items=items, batch=batch or len(items) > 1, stream=stream)


def _is_ids(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(i, int) and not isinstance(i, bool) for i in value)
    )


def _per_prompt(raw: Any, prompts: list[list[int]]) -> list[dict[str, Any]]:
    if raw is None:
        return [{} for _ in prompts]
    if isinstance(raw, dict):
        return [raw for _ in prompts]
    if isinstance(raw, list) and all(isinstance(item, dict) for item in raw):
        if len(raw) != len(prompts):
            raise RequestError(
                f"The number of sampling_params ({len(raw)}) does not match the number of "
                f"prompts ({len(prompts)})."
            )
        return list(raw)
    raise ContractError("sampling_params: expected an object or an array of objects")


def parse_sampling(raw: dict[str, Any]) -> SamplingParams:
    """Validate the sampling parameters SGLang checks and the emulator uses."""
    max_new = raw.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    if max_new is not None:
        if not isinstance(max_new, int) or isinstance(max_new, bool):
            raise ContractError("sampling_params.max_new_tokens: expected an integer")
        if max_new < 0:
            raise RequestError(f"max_new_tokens must be at least 0, got {max_new}.")
    temperature = raw.get("temperature", 1.0)
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise ContractError("sampling_params.temperature: expected a number")
    if temperature < 0:
        raise RequestError(f"temperature must be non-negative, got {float(temperature)}.")
    top_p = raw.get("top_p", 1.0)
    if isinstance(top_p, int | float) and not 0 < top_p <= 1:
        raise RequestError(f"top_p must be in (0, 1], got {float(top_p)}.")
    ignore_eos = raw.get("ignore_eos", False)
    if not isinstance(ignore_eos, bool):
        raise ContractError("sampling_params.ignore_eos: expected a boolean")
    n = raw.get("n", 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise RequestError(f"n must be at least 1, got {n}.")
    return SamplingParams(max_new, float(temperature), ignore_eos, n)


def _rid(rids: Any, index: int, samples: int) -> str:
    if samples == 1:
        if isinstance(rids, str) and index == 0:
            return rids
        if isinstance(rids, list) and index < len(rids) and isinstance(rids[index], str):
            return str(rids[index])
    return uuid.uuid4().hex
