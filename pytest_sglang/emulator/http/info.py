"""Identity endpoints: ``/v1/models``, ``/model_info``, ``/server_info`` and their old names.

0.5.23 serves ``/model_info`` and ``/server_info`` and keeps ``/get_model_info`` and
``/get_server_info`` as deprecated aliases (each call logs a warning); 0.5.5 has only the
``get_`` names. ``/v1/models`` reports ``created`` as the request time and ``max_model_len`` as
the effective context length (``--context-length``, else the model's ``config.json``), while
``/server_info`` reports ``context_length`` as given: ``null`` when it was not.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from pytest_sglang.emulator.config.server_args import decode_graph_sizes
from pytest_sglang.emulator.http.web import json_response
from pytest_sglang.emulator.runtime.context import EmulatorContext

GIB = 1 << 30


def model_card(ctx: EmulatorContext) -> dict[str, Any]:
    """Return the served model's card (broken on purpose under ``malformed-models``)."""
    name = ctx.config.served_model_name
    if "malformed-models" in ctx.faults:
        # Breaks the model-list contract at /data/0: `object` missing, max_model_len a string.
        return {
            "id": name,
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": name,
            "parent": None,
            "max_model_len": str(ctx.config.context_length),
        }
    return {
        "id": name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": name,
        "parent": None,
        "max_model_len": ctx.config.context_length,
    }


def model_info(ctx: EmulatorContext) -> dict[str, Any]:
    """``/model_info`` (0.5.23 fields) or ``/get_model_info`` (0.5.5 fields)."""
    args = ctx.config.server_args
    info: dict[str, Any] = {
        "model_path": args["model_path"],
        "tokenizer_path": args["tokenizer_path"],
        "is_generation": True,
        "preferred_sampling_params": args["preferred_sampling_params"],
        "weight_version": args["weight_version"],
        "has_image_understanding": False,
        "has_audio_understanding": False,
    }
    if ctx.is_new:
        info = {
            "model_path": args["model_path"],
            "served_model_name": args["served_model_name"],
            "tokenizer_path": args["tokenizer_path"],
            "is_generation": True,
            "preferred_sampling_params": args["preferred_sampling_params"],
            "weight_version": args["weight_version"],
            "load_format": args["load_format"],
            "reasoning_parser": args["reasoning_parser"],
            "tool_call_parser": args["tool_call_parser"],
            "disaggregation_mode": args["disaggregation_mode"],
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": ctx.config.model.model_type,
            "architectures": [ctx.config.model.architecture],
            "embedding": embedding_info(ctx),
        }
    return info


def embedding_info(ctx: EmulatorContext) -> dict[str, Any]:
    """0.5.23's ``/model_info`` ``embedding`` object, as it is for a generation model."""
    budget = int(ctx.config.server_args.get("chunked_prefill_size") or 8192)
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
    ]
    return {
        "family": "none",
        "task": "none",
        "execution": "none",
        "attention": "none",
        "pooling": "model_defined",
        "normalize": False,
        "postprocessor": "none",
        "tokenizer_special_tokens": "model_default",
        "supports_dimensions": False,
        "supports_token_embeddings": False,
        "supports_multimodal": False,
        "requires_embedding_flag": False,
        "auto_enable_embedding": False,
        "bcg_eligibility": "disabled",
        "safe_disable_kv_cache": False,
        "safe_disable_radix_cache": False,
        "safe_disable_chunked_prefill": False,
        "enabled": False,
        "matryoshka_dimensions": [],
        "bcg": {
            "prefill_backend": "disabled",
            "enabled": False,
            "capture_token_budget": budget,
            "capture_batch_sizes": [bs for bs in sizes if bs <= budget],
        },
        "cache": {
            "kv_cache_disabled": False,
            "radix_cache_disabled": bool(ctx.config.server_args["disable_radix_cache"]),
            "chunked_prefill_disabled": False,
        },
    }


def server_info(ctx: EmulatorContext) -> dict[str, Any]:
    """Return the resolved args, scheduler info, ``internal_states`` and ``version``.

    Args SGLang leaves unset are ``null``; ``internal_states`` has one entry per DP rank.

    ``context_length`` and ``max_running_requests`` stay ``null`` unless given (or, for the
    latter, declared 48 by speculative decoding); the effective values are ``max_model_len``
    in ``/v1/models`` and ``internal_states[i].effective_max_running_requests_per_dp``.
    """
    args = dict(ctx.config.server_args)
    dp_size = max(1, int(args["dp_size"]))
    info: dict[str, Any] = dict(args)
    if ctx.is_new:
        info["launch_command"] = ctx.config.launch_command
    info.update(
        status="ready",
        max_total_num_tokens=ctx.scheduler.max_total_num_tokens,
        max_req_input_len=ctx.scheduler.max_req_input_len,
    )
    if ctx.is_new:
        info["hicache_object_layout"] = {
            "enabled": False,
            "backend": None,
            "page_size": int(args["page_size"] or 1),
            "hicache_object_layout": {"pools": []},
            "reason": "Hierarchical cache is disabled",
        }
        info["kv_events"] = None
        info["startup_time"] = {**startup_times(ctx), "tokenizer_e2e": ctx.state.startup_time}
    info["internal_states"] = [internal_state(ctx, args) for _ in range(dp_size)]
    info["version"] = ctx.options.version
    if ctx.is_new:
        info["frontend"] = "python"
    return info


def startup_times(ctx: EmulatorContext) -> dict[str, Any]:
    """0.5.23's scheduler ``startup_time`` object: seconds per loading phase."""
    total = ctx.options.load_time
    spec = ctx.spec is not None
    graph = 0.0 if ctx.config.server_args["disable_cuda_graph"] else 0.3 * total
    return {
        "load_weight": round(0.4 * total, 6),
        "kv_cache_allocation": round(0.1 * total, 6),
        "scheduler_e2e": round(total, 6),
        "cuda_graph": {
            "prefill": 0.0,
            "decode": graph,
            "target_verify": graph / 2 if spec else 0.0,
            "draft_prefill": 0.0,
            "draft_decode": graph / 4 if spec else 0.0,
            "draft_extend": graph / 8 if spec else 0.0,
        },
    }


def internal_state(ctx: EmulatorContext, args: dict[str, Any]) -> dict[str, Any]:
    """One DP rank's ``internal_states`` entry."""
    sched = ctx.stats.scheduler
    tp_size = max(1, int(args["tp_size"]))
    weight = round(ctx.config.model.params_billion * 2e9 / tp_size / GIB, 3)
    # 64 KiB of KV cache per token and GPU: about right for an 8B GQA model.
    kvcache = round(ctx.scheduler.max_total_num_tokens * 65536 / tp_size / GIB, 3)
    state: dict[str, Any] = dict(args)
    if ctx.is_new:
        if state.get("pp_max_micro_batch_size") is None:
            # The scheduler's post-publish override (srt/managers/scheduler.py).
            pp = max(1, int(args["pp_size"]))
            state["pp_max_micro_batch_size"] = max(ctx.scheduler.max_running_requests // pp, 1)
        cuda_graph = not args["disable_cuda_graph"]
        graph = {
            "prefill": 0.0,
            "decode": 0.512 if cuda_graph else 0.0,
            "target_verify": 0.256 if ctx.spec and cuda_graph else 0.0,
            "draft_prefill": 0.0,
            "draft_decode": 0.128 if ctx.spec and cuda_graph else 0.0,
            "draft_extend": 0.064 if ctx.spec and cuda_graph else 0.0,
        }
        graph_bs = decode_graph_sizes(args)[1] if cuda_graph else []
        state.update(
            world_size=tp_size * max(1, int(args["pp_size"])),
            startup_time=startup_times(ctx),
            effective_max_running_requests_per_dp=ctx.scheduler.max_running_requests,
            last_gen_throughput=sched.gen_throughput,
            memory_usage={
                "weight": weight,
                "kvcache": kvcache,
                "startup_available": round(80.0 - weight - kvcache, 3),
                "token_capacity": ctx.scheduler.max_total_num_tokens,
                "token_capacity_swa": None,
                "graph": graph,
            },
            disaggregation_mode=args["disaggregation_mode"],
            decode_cuda_graph_bs=graph_bs,
            decode_cuda_graph_memory_gb=round(
                graph["decode"]
                + graph["target_verify"]
                + graph["draft_decode"]
                + graph["draft_extend"],
                3,
            ),
        )
    else:
        state.update(
            last_gen_throughput=sched.gen_throughput,
            memory_usage={
                "weight": weight,
                "kvcache": kvcache,
                "token_capacity": ctx.scheduler.max_total_num_tokens,
                "graph": 0.512,
            },
        )
    accept = sched.avg_spec_accept_length
    if ctx.spec is not None and accept is not None:
        state["avg_spec_accept_length"] = accept
    return state


def routes(ctx: EmulatorContext) -> list[BaseRoute]:
    """``/v1/models`` and the info routes of the emulated version."""

    async def list_models(request: Request) -> Response:
        return json_response({"object": "list", "data": [model_card(ctx)]})

    async def get_model(request: Request) -> Response:
        name = request.path_params["model"]
        if name != ctx.config.served_model_name:
            error = {
                "message": f"The model '{name}' does not exist",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }
            return json_response({"error": error}, 404)
        return json_response(model_card(ctx))

    def deprecated(old: str, new: str) -> None:
        if ctx.is_new:
            ctx.log.warning(
                "Endpoint '%s' is deprecated and will be removed in a future version. "
                "Please use '%s' instead.",
                old,
                new,
            )

    async def get_model_info(request: Request) -> Response:
        if request.url.path == "/get_model_info":
            deprecated("/get_model_info", "/model_info")
        return json_response(model_info(ctx))

    async def get_server_info(request: Request) -> Response:
        if request.url.path == "/get_server_info":
            deprecated("/get_server_info", "/server_info")
        return json_response(server_info(ctx))

    result: list[BaseRoute] = [
        Route("/v1/models", list_models, methods=["GET"]),
        Route("/v1/models/{model:path}", get_model, methods=["GET"]),
        Route("/get_model_info", get_model_info, methods=["GET"]),
        Route("/get_server_info", get_server_info, methods=["GET"]),
    ]
    if ctx.is_new:
        result += [
            Route("/model_info", get_model_info, methods=["GET"]),
            Route("/server_info", get_server_info, methods=["GET"]),
        ]
    return result
