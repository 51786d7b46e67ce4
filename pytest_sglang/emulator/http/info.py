"""Identity endpoints: ``/v1/models``, ``/model_info``, ``/server_info`` and their old names.

0.5.23 serves ``/model_info`` and ``/server_info`` and keeps ``/get_model_info`` and
``/get_server_info`` as deprecated aliases (each call logs a warning); 0.5.5 has only the
``get_`` names. ``/v1/models`` reports ``created`` as the request time and ``max_model_len`` as
the effective context length.
"""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

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
        info.update(
            served_model_name=args["served_model_name"],
            load_format=args["load_format"],
            reasoning_parser=args["reasoning_parser"],
            tool_call_parser=args["tool_call_parser"],
            disaggregation_mode=args["disaggregation_mode"],
            model_type=ctx.config.model.model_type,
            architectures=[ctx.config.model.architecture],
        )
    return info


def server_info(ctx: EmulatorContext) -> dict[str, Any]:
    """Return the flat resolved args plus scheduler info, ``internal_states`` and ``version``."""
    args = dict(ctx.config.server_args)
    if args["max_running_requests"] is None:
        # Unset, it shows the scheduler's limit as resolved from the KV capacity, not null.
        dp = max(1, int(args["dp_size"]))
        args["max_running_requests"] = ctx.scheduler.max_running_requests * dp
    info: dict[str, Any] = {
        **args,
        "status": "ready",
        "max_total_num_tokens": ctx.scheduler.max_total_num_tokens,
        "max_req_input_len": ctx.scheduler.max_req_input_len,
    }
    if ctx.is_new:
        info["startup_time"] = ctx.state.startup_time
    dp_size = max(1, int(args["dp_size"]))
    info["internal_states"] = [internal_state(ctx, args) for _ in range(dp_size)]
    info["version"] = ctx.options.version
    if ctx.is_new:
        info["launch_command"] = ctx.config.launch_command
        info["frontend"] = "python"
    return info


def internal_state(ctx: EmulatorContext, args: dict[str, Any]) -> dict[str, Any]:
    """One DP rank's ``internal_states`` entry."""
    sched = ctx.stats.scheduler
    tp_size = max(1, int(args["tp_size"]))
    weight = round(ctx.config.model.params_billion * 2e9 / tp_size / GIB, 3)
    # 64 KiB of KV cache per token and GPU: about right for an 8B GQA model.
    kvcache = round(ctx.scheduler.max_total_num_tokens * 65536 / tp_size / GIB, 3)
    state: dict[str, Any] = dict(args)
    if ctx.is_new:
        graph_bs = list(args.get("cuda_graph_bs_decode") or [])
        state.update(
            world_size=tp_size * max(1, int(args["pp_size"])),
            startup_time=ctx.state.startup_time,
            effective_max_running_requests_per_dp=ctx.scheduler.max_running_requests,
            last_gen_throughput=sched.gen_throughput,
            memory_usage={
                "weight": weight,
                "kvcache": kvcache,
                "startup_available": round(80.0 - weight - kvcache, 3),
                "token_capacity": ctx.scheduler.max_total_num_tokens,
                "token_capacity_swa": 0,
                "graph": {
                    "prefill": 0.0,
                    "decode": 0.512,
                    "target_verify": 0.256 if ctx.spec else 0.0,
                    "draft_prefill": 0.0,
                    "draft_decode": 0.128 if ctx.spec else 0.0,
                    "draft_extend": 0.064 if ctx.spec else 0.0,
                },
            },
            disaggregation_mode=args["disaggregation_mode"],
            decode_cuda_graph_bs=graph_bs,
            decode_cuda_graph_memory_gb=0.512,
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
