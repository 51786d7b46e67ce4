"""Building the batch engine from a launch configuration (config in, engine out)."""

from __future__ import annotations

import logging
import os

from pytest_sglang.emulator.config.options import LaunchConfig
from pytest_sglang.emulator.config.perf_options import PerfOptions
from pytest_sglang.emulator.config.server_args import SchedulerInfo, decode_graph_sizes
from pytest_sglang.emulator.engine.adaptive import AdaptiveSteps, load_config
from pytest_sglang.emulator.engine.batch_engine import BatchEngine, BatchEngineConfig
from pytest_sglang.emulator.engine.engine import SpecConfig
from pytest_sglang.emulator.engine.power import PowerMeter
from pytest_sglang.emulator.engine.stats import SchedulerStats
from pytest_sglang.emulator.engine.tokenizer import Tokenizer
from pytest_sglang.emulator.engine.trace import TraceWriter

__all__ = ["build_batch_engine"]


def build_batch_engine(
    config: LaunchConfig,
    perf: PerfOptions,
    sched: SchedulerInfo,
    stats: SchedulerStats,
    tokenizer: Tokenizer,
    spec: SpecConfig | None,
    log: logging.Logger,
    power: PowerMeter | None = None,
) -> BatchEngine:
    """Build the batch engine for a launch configuration."""
    args = config.server_args
    chunked = args.get("chunked_prefill_size")
    budget = (
        int(chunked)
        if chunked and int(chunked) > 0
        else int(args.get("max_prefill_tokens") or 16384)
    )
    topk = args.get("speculative_eagle_topk")
    adaptive = None
    if spec is not None and args.get("speculative_adaptive"):
        sizes = None if args.get("disable_cuda_graph") else decode_graph_sizes(args)[1]
        buckets = load_config(args.get("speculative_adaptive_config"))
        adaptive = AdaptiveSteps(
            int(args["speculative_num_steps"]),
            buckets,
            sizes,
            lambda old, new, ema: log.info(
                "Adaptive spec params updated: steps %d -> %d (ema_accept_len=%.2f)", old, new, ema
            ),
            zero_step_extend=os.environ.get("SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND", "").lower()
            not in ("true", "1", "yes", "y"),
        )
        first = adaptive.slot(1)
        log.info(
            "AdaptiveSpeculativeParams initialized: steps=%d, candidate_steps=%s",
            first.steps,
            first.candidates,
        )
    engine_config = BatchEngineConfig(
        max_running_requests=sched.max_running_requests,
        max_total_num_tokens=sched.max_total_num_tokens,
        context_length=config.context_length,
        params=perf.params,
        prefill_budget=budget,
        decode_log_interval=max(1, int(args.get("decode_log_interval") or 40)),
        cuda_graph=not args.get("disable_cuda_graph"),
        speculative=spec,
        topk=int(topk) if topk else 1,
        adaptive=adaptive,
        speedup=perf.speedup,
        noise=perf.noise,
        noise_interval=perf.noise_interval,
        seed=perf.seed,
    )
    trace = None if perf.trace is None else TraceWriter(perf.trace)
    return BatchEngine(engine_config, stats, tokenizer, log, trace, power)
