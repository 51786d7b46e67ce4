"""Everything a route or the lifecycle needs, built once per process."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from pytest_sglang.emulator.config.faults import Faults
from pytest_sglang.emulator.config.options import EmulatorOptions, LaunchConfig
from pytest_sglang.emulator.config.server_args import SchedulerInfo, scheduler_info
from pytest_sglang.emulator.engine.engine import Engine, GenerationRequest, SpecConfig
from pytest_sglang.emulator.engine.power import PowerMeter
from pytest_sglang.emulator.engine.prefix_cache import PrefixCache
from pytest_sglang.emulator.engine.simple_engine import SimpleEngine, SimpleEngineConfig
from pytest_sglang.emulator.engine.stats import ServerStats
from pytest_sglang.emulator.engine.tokenizer import Tokenizer
from pytest_sglang.emulator.engine.tracking import RequestRun
from pytest_sglang.emulator.runtime.engines import build_batch_engine
from pytest_sglang.emulator.runtime.errors import RequestError
from pytest_sglang.emulator.runtime.gpus import GpuHolder
from pytest_sglang.emulator.runtime.logs import scheduler_logger, server_logger
from pytest_sglang.emulator.runtime.state import ServerState


@dataclass(frozen=True)
class HealthSettings:
    """SGLang's health-check environment variables, read once at startup."""

    generate_on_health: bool = True
    timeout: float = 20.0

    @classmethod
    def from_env(cls) -> HealthSettings:
        """Read ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` and ``SGLANG_HEALTH_CHECK_TIMEOUT``."""
        flag = os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true")
        timeout = os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20")
        return cls(
            generate_on_health=flag.strip().lower() in ("1", "true", "yes"),
            timeout=float(timeout),
        )


@dataclass
class EmulatorContext:
    """The emulated server: configuration, status, counters, engine, tokenizer."""

    config: LaunchConfig
    engine: Engine
    tokenizer: Tokenizer
    scheduler: SchedulerInfo
    stats: ServerStats
    state: ServerState = field(default_factory=ServerState)
    health: HealthSettings = field(default_factory=HealthSettings)
    spec: SpecConfig | None = None
    gpu_holder: GpuHolder | None = None
    log: logging.Logger = field(default_factory=server_logger)
    prefix_cache: PrefixCache | None = None

    @property
    def options(self) -> EmulatorOptions:
        """The ``--emulator-*`` options."""
        return self.config.options

    @property
    def faults(self) -> Faults:
        """The active faults."""
        return self.config.options.faults

    @property
    def is_new(self) -> bool:
        """Whether the 0.5.23 surface is emulated."""
        return self.config.options.is_new

    def check_lengths(self, input_len: int, max_new_tokens: int | None) -> None:
        """Reject a request that does not fit the context, with SGLang's messages.

        :raises RequestError: as SGLang's tokenizer manager raises ValueError.
        """
        context_len = self.config.context_length
        if input_len >= context_len:
            raise RequestError(
                f"The input ({input_len} tokens) is longer than the model's context length "
                f"({context_len} tokens)."
            )
        if max_new_tokens is not None and input_len + max_new_tokens >= context_len:
            raise RequestError(
                "Requested token count exceeds the model's maximum context length of "
                f"{context_len} tokens. You requested a total of {input_len + max_new_tokens} "
                f"tokens: {input_len} tokens from the input messages and {max_new_tokens} "
                "tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit."
            )

    def run(self, request: GenerationRequest, *, streaming: bool) -> RequestRun:
        """Return a ``RequestRun`` for ``request`` against this server's engine."""
        return RequestRun(
            self.engine,
            self.stats.tokenizer,
            self.tokenizer,
            request,
            streaming=streaming,
            stream_interval=int(self.config.server_args["stream_interval"] or 1),
            num_draft_tokens=0 if self.spec is None else self.spec.num_draft_tokens,
            prefix_cache=self.prefix_cache,
        )


def build_context(config: LaunchConfig) -> EmulatorContext:
    """Build the context, with the engine ``--emulator-engine`` selects, for ``config``."""
    args = config.server_args
    sched = scheduler_info(args, config.context_length)
    stats = ServerStats()
    faults = config.options.faults
    spec = None
    if config.speculative_algorithm is not None:
        draft_tokens = int(args["speculative_num_draft_tokens"] or 2)
        spec = SpecConfig(
            algorithm=config.speculative_algorithm,
            num_steps=int(args["speculative_num_steps"] or max(1, draft_tokens - 1)),
            num_draft_tokens=draft_tokens,
            accept_length=min(config.options.accept_length, float(draft_tokens)),
        )
    diverge = faults.value("spec-diverge") if spec and "spec-diverge" in faults else None
    tokenizer = Tokenizer(
        config.model.vocab_size,
        config.model.eos_token_id,
        None if diverge is None else int(diverge),
    )
    perf = config.options.perf
    holder = (
        None
        if config.options.gpu_dir is None
        else GpuHolder(config.options.gpu_dir, args, server_logger())
    )
    engine: Engine
    if perf.engine == "batch":
        # Fake GPUs get power and energy from the batch engine's forwards.
        power = None if holder is None else PowerMeter(len(holder.gpus), perf.speedup)
        engine = build_batch_engine(
            config, perf, sched, stats.scheduler, tokenizer, spec, scheduler_logger(), power
        )
    else:
        engine = _simple_engine(config, sched, stats, tokenizer, spec)
    return EmulatorContext(
        config=config,
        engine=engine,
        tokenizer=tokenizer,
        scheduler=sched,
        stats=stats,
        health=HealthSettings.from_env(),
        spec=spec,
        prefix_cache=PrefixCache(
            sched.max_total_num_tokens, enabled=not args["disable_radix_cache"]
        ),
        gpu_holder=holder,
    )


def _simple_engine(
    config: LaunchConfig,
    sched: SchedulerInfo,
    stats: ServerStats,
    tokenizer: Tokenizer,
    spec: SpecConfig | None,
) -> SimpleEngine:
    args = config.server_args
    speedup = config.options.perf.speedup
    return SimpleEngine(
        SimpleEngineConfig(
            decode_s=config.options.decode_ms / 1000.0 / speedup,
            prefill_s=config.options.prefill_ms / 1000.0 / speedup,
            max_running_requests=sched.max_running_requests,
            max_total_num_tokens=sched.max_total_num_tokens,
            context_length=config.context_length,
            decode_log_interval=max(1, int(args["decode_log_interval"] or 40)),
            cuda_graph=not args["disable_cuda_graph"],
            speculative=spec,
        ),
        stats.scheduler,
        tokenizer,
        scheduler_logger(),
    )
