"""SGLang's ServerArgs: defaults and the resolution that ``/server_info`` shows.

``/server_info`` is the flat dict of every ServerArgs field (546 in 0.5.23) as *resolved*:
what the launch command gave, with the decisions SGLang's resolution declares applied over
it (0.5.23's ``ServerArgs.resolved_dict``: ``srt/server_args.py``, ``srt/arg_groups/``). A
field nobody gave and no resolution step decides stays ``null``: **``context_length`` and
``max_running_requests`` are ``null`` unless given** (the effective values live elsewhere:
``max_model_len`` in ``/v1/models``, and
``internal_states[0].effective_max_running_requests_per_dp``, which the scheduler sizes from
the KV capacity), and so are 0.5.23's per-phase CUDA-graph flags (the resolved sizes are in
``cuda_graph_config``). Speculative decoding declares ``max_running_requests=48`` when it is
not given (``srt/arg_groups/speculative_hook.py``), so under EAGLE it shows 48, and its
step/top-k/draft triple is auto-chosen. ``tokenizer_path`` and ``served_model_name`` default
to ``model_path``. Fields that need a GPU to choose (``mem_fraction_static``,
``attention_backend``) get the value SGLang picks on an H100. The table below carries the
fields clients read, with SGLang's defaults; flags the emulator does not know are added
verbatim by the CLI.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_sglang.emulator.config.model import ModelProfile
from pytest_sglang.emulator.engine.adaptive import candidate_union, load_config

NEW_VERSION = "0.5.23"
OLD_VERSION = "0.5.5"
VERSIONS = (NEW_VERSION, OLD_VERSION)

# Algorithms for which SGLang resets an unset max_running_requests to 48
# (SGLang's srt/server_args.py, the speculative-decoding checks).
SPEC_CAPPED_ALGORITHMS = frozenset({"EAGLE", "EAGLE3", "STANDALONE", "NGRAM"})
SPEC_MAX_RUNNING_REQUESTS = 48
SPEC_MAX_RUNNING_WARNING = (
    "Max running requests is reset to 48 for speculative decoding. You can override this by "
    "explicitly setting --max-running-requests."
)
# The CUDA-graph batch sizes SGLang captures by default, before capping at the max batch size.
DEFAULT_CUDA_GRAPH_BS = (1, 2, 4, 8, 12, *range(16, 257, 8))
DEFAULT_CUDA_GRAPH_MAX_BS = 256

_DEFAULTS: dict[str, Any] = {
    "model_path": None,
    "tokenizer_path": None,
    "tokenizer_mode": "auto",
    "tokenizer_worker_num": 1,
    "skip_tokenizer_init": False,
    "load_format": "auto",
    "model_loader_extra_config": "{}",
    "trust_remote_code": False,
    "context_length": None,
    "is_embedding": False,
    "enable_multimodal": None,
    "revision": None,
    "model_impl": "auto",
    "dtype": "auto",
    "quantization": None,
    "quantization_param_path": None,
    "kv_cache_dtype": "auto",
    "enable_fp32_lm_head": False,
    "mem_fraction_static": None,
    "max_running_requests": None,
    "max_queued_requests": None,
    "max_total_tokens": None,
    "chunked_prefill_size": None,
    "max_prefill_tokens": 16384,
    "schedule_policy": "fcfs",
    "enable_priority_scheduling": False,
    "schedule_conservativeness": 1.0,
    "page_size": None,
    "disable_radix_cache": False,
    "disable_chunked_prefix_cache": False,
    "disable_overlap_schedule": False,
    "num_continuous_decode_steps": 1,
    "enable_mixed_chunk": False,
    "nccl_port": None,
    "dist_timeout": None,
    "dist_init_addr": None,
    "nnodes": 1,
    "node_rank": 0,
    "tp_size": 1,
    "pp_size": 1,
    "pp_max_micro_batch_size": None,
    "dp_size": 1,
    "attn_dp_size": 1,
    "load_balance_method": "round_robin",
    "enable_dp_attention": False,
    "enable_dp_lm_head": False,
    "enable_p2p_check": False,
    "device": "cuda",
    "base_gpu_id": 0,
    "gpu_id_step": 1,
    "random_seed": None,
    "watchdog_timeout": 300,
    "sleep_on_idle": False,
    "host": "127.0.0.1",
    "port": 30000,
    "grpc_mode": False,
    "skip_server_warmup": False,
    "warmups": None,
    "enable_http2": False,
    "ssl_keyfile": None,
    "ssl_certfile": None,
    "api_key": None,
    "admin_api_key": None,
    "served_model_name": None,
    "weight_version": "default",
    "chat_template": None,
    "completion_template": None,
    "file_storage_path": None,
    "enable_cache_report": False,
    "reasoning_parser": None,
    "tool_call_parser": None,
    "tool_server": None,
    "preferred_sampling_params": None,
    "allow_auto_truncate": False,
    "stream_interval": 1,
    "stream_response_default_include_usage": False,
    "incremental_streaming_output": False,
    "log_level": "info",
    "log_level_http": None,
    "log_requests": False,
    "log_requests_level": 2,
    "crash_dump_folder": None,
    "show_time_cost": False,
    "enable_metrics": False,
    "enable_metrics_for_all_schedulers": False,
    "bucket_time_to_first_token": None,
    "bucket_inter_token_latency": None,
    "bucket_e2e_request_latency": None,
    "decode_log_interval": 40,
    "enable_request_time_stats_logging": False,
    "kv_events_config": None,
    "enable_trace": False,
    "attention_backend": None,
    "decode_attention_backend": None,
    "prefill_attention_backend": None,
    "sampling_backend": None,
    "grammar_backend": None,
    "mm_attention_backend": None,
    "cuda_graph_max_bs": None,
    "cuda_graph_bs": None,
    "cuda_graph_max_bs_decode": None,
    "cuda_graph_max_bs_prefill": None,
    "cuda_graph_bs_decode": None,
    "disable_cuda_graph": False,
    "disable_cuda_graph_padding": False,
    "enable_profile_cuda_graph": False,
    "enable_nccl_nvls": False,
    "enable_symm_mem": False,
    "triton_attention_reduce_in_fp32": False,
    "triton_attention_num_kv_splits": 8,
    "disable_custom_all_reduce": False,
    "enable_mscclpp": False,
    "enable_flashinfer_allreduce_fusion": False,
    "enforce_disable_flashinfer_allreduce_fusion": False,
    "flashinfer_allreduce_fusion_backend": None,
    "enable_torch_compile": False,
    "torch_compile_max_bs": 32,
    "speculative_algorithm": None,
    "speculative_draft_model_path": None,
    "speculative_draft_model_revision": None,
    "speculative_draft_load_format": None,
    "speculative_num_steps": None,
    "speculative_eagle_topk": None,
    "speculative_num_draft_tokens": None,
    "speculative_accept_threshold_single": 1.0,
    "speculative_accept_threshold_acc": 1.0,
    "speculative_token_map": None,
    "speculative_attention_mode": "prefill",
    "speculative_adaptive": False,
    "speculative_adaptive_config": None,
    "ep_size": 1,
    "moe_a2a_backend": "none",
    "moe_runner_backend": "auto",
    "ep_num_redundant_experts": 0,
    "enable_eplb": False,
    "enable_hierarchical_cache": False,
    "hicache_ratio": 2.0,
    "hicache_size": 0,
    "hicache_write_policy": "write_through",
    "enable_lora": None,
    "max_lora_rank": None,
    "lora_target_modules": None,
    "lora_paths": None,
    "max_loaded_loras": None,
    "max_loras_per_batch": 8,
    "lora_backend": "csgmv",
    "enable_two_batch_overlap": False,
    "enable_single_batch_overlap": False,
    "cpu_offload_gb": 0,
    "disaggregation_mode": "null",
    "disaggregation_transfer_backend": "mooncake",
    "disaggregation_bootstrap_port": 8998,
    "num_reserved_decode_tokens": 512,
    "download_dir": None,
    "delete_ckpt_after_loading": False,
    "enable_deterministic_inference": False,
    "enable_memory_saver": False,
    "enable_custom_logit_processor": False,
    "enable_return_hidden_states": False,
}

# 0.5.23 replaced --cuda-graph-max-bs/--cuda-graph-bs by per-phase flags and added these.
_NEW_ONLY = frozenset(
    {
        "attn_dp_size",
        "enable_http2",
        "admin_api_key",
        "cuda_graph_max_bs_decode",
        "cuda_graph_max_bs_prefill",
        "cuda_graph_bs_decode",
        "enforce_disable_flashinfer_allreduce_fusion",
        "flashinfer_allreduce_fusion_backend",
        "speculative_adaptive",
        "speculative_adaptive_config",
    }
)
_OLD_ONLY = frozenset({"cuda_graph_max_bs", "cuda_graph_bs"})


class ServerArgsError(ValueError):
    """The arguments cannot be resolved; SGLang fails here before loading anything."""


@dataclass(frozen=True)
class ResolvedArgs:
    """The flat resolved args and the warnings SGLang logs while resolving them."""

    args: dict[str, Any]
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class SchedulerInfo:
    """What the scheduler reports after loading: KV capacity and request limits."""

    max_total_num_tokens: int
    max_req_input_len: int
    max_running_requests: int


def defaults(version: str) -> dict[str, Any]:
    """SGLang's ServerArgs defaults for ``version``, before resolution."""
    excluded = _OLD_ONLY if version == NEW_VERSION else _NEW_ONLY
    return {key: value for key, value in _DEFAULTS.items() if key not in excluded}


def resolve(given: Mapping[str, Any], version: str, model: ModelProfile) -> ResolvedArgs:
    """Apply SGLang's defaults and resolution side effects to the flags ``given``."""
    args = defaults(version)
    args.update(given)
    warnings: list[str] = []
    model_path = str(args["model_path"])
    args["tokenizer_path"] = args["tokenizer_path"] or model_path
    args["served_model_name"] = args["served_model_name"] or model_path
    if args["random_seed"] is None:
        args["random_seed"] = zlib.crc32(model_path.encode()) % (1 << 30)
    if args["mem_fraction_static"] is None:
        args["mem_fraction_static"] = 0.85
    if args["chunked_prefill_size"] is None:
        args["chunked_prefill_size"] = 8192
    if args["page_size"] is None:
        args["page_size"] = 1
    if args["attention_backend"] is None:
        args["attention_backend"] = "fa3"
    if args["sampling_backend"] is None:
        args["sampling_backend"] = "flashinfer"
    if args["grammar_backend"] is None:
        args["grammar_backend"] = "xgrammar"
    _resolve_speculative(args, model, warnings)
    _resolve_cuda_graph(args, version)
    if version == NEW_VERSION:
        args["cuda_graph_config"] = cuda_graph_config(args)
    if version == NEW_VERSION:
        # SGLang synthesises the flag from the attention-DP size (srt/server_args.py).
        args["attn_dp_size"] = args["dp_size"] if args["enable_dp_attention"] else 1
        args["enable_dp_attention"] = args["attn_dp_size"] > 1
    return ResolvedArgs(args=args, warnings=tuple(warnings))


def _resolve_speculative(args: dict[str, Any], model: ModelProfile, warnings: list[str]) -> None:
    algorithm = args["speculative_algorithm"]
    if algorithm is not None:
        algorithm = str(algorithm).upper()
        if algorithm == "NEXTN":
            algorithm = "EAGLE"  # NEXTN is an alias of EAGLE.
        args["speculative_algorithm"] = algorithm
    if args.get("speculative_adaptive"):
        _resolve_adaptive(args, warnings)
    if algorithm is None:
        return
    if algorithm in SPEC_CAPPED_ALGORITHMS and args["max_running_requests"] is None:
        args["max_running_requests"] = SPEC_MAX_RUNNING_REQUESTS
        warnings.append(SPEC_MAX_RUNNING_WARNING)
    if algorithm == "NGRAM":
        return
    steps = args["speculative_num_steps"]
    if steps is None:
        if args["speculative_eagle_topk"] is not None or (
            args["speculative_num_draft_tokens"] is not None
        ):
            raise ServerArgsError(
                "AssertionError: --speculative-eagle-topk and --speculative-num-draft-tokens "
                "must be omitted when --speculative-num-steps is omitted (SGLang then "
                "auto-chooses all three)."
            )
        llama_like = model.architecture in {"LlamaForCausalLM", "Grok1ForCausalLM"}
        triple = (5, 4, 8) if llama_like and algorithm != "STANDALONE" else (3, 1, 4)
        (
            args["speculative_num_steps"],
            args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"],
        ) = triple
        return
    if args["speculative_eagle_topk"] is None:
        args["speculative_eagle_topk"] = 1
    if args["speculative_eagle_topk"] == 1 and args["speculative_num_draft_tokens"] != steps + 1:
        if args["speculative_num_draft_tokens"] is not None:
            warnings.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1"
            )
        args["speculative_num_draft_tokens"] = steps + 1


def _adaptive_unsupported(args: Mapping[str, Any]) -> str | None:
    """SGLang's ``adaptive_unsupported_reason``: why adaptive speculation cannot run."""
    algorithm, topk = args["speculative_algorithm"], args["speculative_eagle_topk"]
    if algorithm not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if args["enable_dp_attention"] and int(args["dp_size"]) > 1:
        return (
            "attention DP is not supported (adaptive tier decisions are not synchronized "
            "across DP ranks)"
        )
    for flag, why in (
        ("enable_multi_layer_eagle", "MultiLayerEagleWorkerV2 does not implement adaptive"),
        (
            "enable_two_batch_overlap",
            "adaptive state swap would discard the TboAttnBackend wrapper",
        ),
        ("enable_pdmux", "adaptive state swap does not update decode_attn_backend_group"),
    ):
        if args.get(flag):
            return f"{flag}=True is not supported ({why})"
    return None


def _resolve_adaptive(args: dict[str, Any], warnings: list[str]) -> None:
    """``--speculative-adaptive``: off with a warning where unsupported, else steps checked."""
    reason = _adaptive_unsupported(args)
    if reason is not None:
        warnings.append(
            f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."
        )
        args["speculative_adaptive"] = False
        return
    try:
        candidates = candidate_union(load_config(args["speculative_adaptive_config"]))
    except ValueError as exc:
        raise ServerArgsError(str(exc)) from None
    if args["speculative_eagle_topk"] is None:
        args["speculative_eagle_topk"] = 1
    if args["speculative_num_steps"] is None:
        args["speculative_num_steps"] = candidates[len(candidates) // 2]
    if args["speculative_num_steps"] not in candidates:
        raise ServerArgsError(
            f"ValueError: --speculative-num-steps={args['speculative_num_steps']} is not in the "
            f"adaptive config candidate_steps {candidates}. Pass one of those values."
        )
    args["speculative_num_draft_tokens"] = args["speculative_num_steps"] + 1


def _resolve_cuda_graph(args: dict[str, Any], version: str) -> None:
    if version == NEW_VERSION:
        # 0.5.23 leaves the per-phase flags as given; cuda_graph_config has the sizes.
        return
    max_key, list_key = ("cuda_graph_max_bs", "cuda_graph_bs")
    if args.get(max_key) is None:
        cap = args["max_running_requests"]
        args[max_key] = min(DEFAULT_CUDA_GRAPH_MAX_BS, cap) if cap else DEFAULT_CUDA_GRAPH_MAX_BS
    if args.get(list_key) is None:
        args[list_key] = [bs for bs in DEFAULT_CUDA_GRAPH_BS if bs <= int(args[max_key])]


def decode_graph_sizes(args: Mapping[str, Any]) -> tuple[int, list[int]]:
    """Return the decode CUDA-graph batch sizes SGLang captures: the largest, and all."""
    given_max = args.get("cuda_graph_max_bs_decode") or args.get("cuda_graph_max_bs")
    cap = args["max_running_requests"]
    if given_max:
        largest = int(given_max)
    else:
        largest = min(DEFAULT_CUDA_GRAPH_MAX_BS, int(cap)) if cap else DEFAULT_CUDA_GRAPH_MAX_BS
    given = args.get("cuda_graph_bs_decode") or args.get("cuda_graph_bs")
    sizes = list(given) if given else [bs for bs in DEFAULT_CUDA_GRAPH_BS if bs <= largest]
    return largest, sizes


def cuda_graph_config(args: Mapping[str, Any]) -> dict[str, Any]:
    """0.5.23's resolved ``cuda_graph_config`` (decode and prefill phases)."""
    backend = "disabled" if args["disable_cuda_graph"] else "full"
    largest, sizes = decode_graph_sizes(args)
    prefill_max = int(args.get("chunked_prefill_size") or 8192)
    prefill_sizes = [
        bs for bs in (4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192) if bs <= prefill_max
    ]

    def phase(max_bs: int, bs: list[int], phase_backend: str) -> dict[str, Any]:
        return {
            "backend": phase_backend,
            "max_bs": max_bs,
            "bs": bs,
            "tc_compiler": "eager",
            "max_context_size": None,
            "full_prefill_max_req": None,
            "full_prefill_prefix_chunk_tokens": None,
            "max_seq_len": None,
        }

    return {
        "decode": phase(largest, sizes, backend),
        "prefill": phase(prefill_max, prefill_sizes, "disabled"),
    }


def scheduler_info(args: Mapping[str, Any], context_length: int) -> SchedulerInfo:
    """KV capacity and request limits the emulated scheduler reports (deterministic).

    ``context_length`` is the effective one (``--context-length``, else the model's).
    """
    context_len = int(context_length)
    total = args["max_total_tokens"]
    max_total = int(total) if total else max(4 * context_len, 65536)
    # SGLang: max_req_len = min(context_len - 1, max_total_num_tokens - 1); input len is 5 less.
    max_req_len = min(context_len - 1, max_total - 1)
    running = args["max_running_requests"]
    dp_size = max(1, int(args["dp_size"]))
    if running:
        per_dp = max(1, int(running) // dp_size)
    else:
        # SGLang sizes the request pool from the KV capacity (ModelRunner.init_memory_pool),
        # and the scheduler runs at most min(max_total_num_tokens // 2, pool size).
        pool = min(max(int(max_total / context_len * 512), 2048), 4096)
        per_dp = max(1, min(max_total // 2, pool))
    return SchedulerInfo(
        max_total_num_tokens=max_total,
        max_req_input_len=max_req_len - 5,
        max_running_requests=per_dp,
    )
