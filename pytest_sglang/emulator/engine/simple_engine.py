"""The simple engine: a fixed delay per token, no batching effects.

Timing: the first token arrives ``prefill`` seconds after the request gets a slot, every further
token ``decode`` seconds later (paced against a deadline, so scheduling jitter does not add up).
At most ``max_running_requests`` requests run at once; the rest queue, as in SGLang.

Length: with ``ignore_eos`` a request generates exactly ``max_new_tokens`` tokens. Without it
the emulated model stops by itself after a deterministic, prompt-dependent number of tokens
between 32 and 128 (the last one being EOS, finish reason ``stop``), unless
``max_new_tokens`` comes first.

Speculation: after the prefill token, each step is one verify forward emitting about
``accept_length`` tokens (a deterministic sequence whose mean is the accept length, each between
1 and ``num_draft_tokens``), so ``completion_tokens / spec_verify_ct`` is about the accept
length. Each token still costs ``decode`` seconds: this engine models the protocol, not
the speed-up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass

from pytest_sglang.emulator.engine.engine import (
    FinishReason,
    GenerationRequest,
    SchedulerTimes,
    SpecConfig,
    TokenChunk,
)
from pytest_sglang.emulator.engine.stats import SchedulerStats
from pytest_sglang.emulator.engine.tokenizer import Tokenizer, prompt_offset

NATURAL_MIN_TOKENS = 32
NATURAL_SPAN = 97
SHUTDOWN_ABORT = FinishReason(
    "abort", message="The server is shutting down.", status_code=503, err_type="ServiceUnavailable"
)


@dataclass(frozen=True)
class SimpleEngineConfig:
    """Timing, limits and speculation of the simple engine."""

    decode_s: float
    prefill_s: float
    max_running_requests: int
    max_total_num_tokens: int
    context_length: int
    decode_log_interval: int = 40
    cuda_graph: bool = True
    speculative: SpecConfig | None = None


class SimpleEngine:
    """Fixed-delay token generation; see the module docstring."""

    def __init__(
        self,
        config: SimpleEngineConfig,
        stats: SchedulerStats,
        tokenizer: Tokenizer,
        log: logging.Logger,
    ) -> None:
        self.config = config
        self._stats = stats
        self._tokenizer = tokenizer
        self._log = log
        self._slots = asyncio.Semaphore(config.max_running_requests)
        self._idle_since: float | None = time.monotonic()
        self._stopping = False
        stats.window_start = time.monotonic()

    async def start(self) -> None:
        """Nothing runs in the background."""

    async def stop(self) -> None:
        """Make running and queued requests end at their next step with finish ``abort``."""
        self._stopping = True

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[TokenChunk, None]:
        """Queue for a slot, then yield the prefill token and one chunk per decode step."""
        stats = self._stats
        stats.num_queued += 1
        queued = time.monotonic()
        try:
            await self._slots.acquire()
        finally:
            stats.num_queued -= 1
        entered = time.monotonic()
        held = len(request.input_ids)
        try:
            if stats.num_running == 0 and self._idle_since is not None:
                # Idle time is not decode time: keep it out of the throughput window.
                stats.window_start += time.monotonic() - self._idle_since
            stats.num_running += 1
            stats.used_tokens += held
            self._log_prefill(request)
            timed = False
            async with aclosing(self._steps(request)) as steps:
                async for chunk in steps:
                    stats.used_tokens += len(chunk.token_ids)
                    held += len(chunk.token_ids)
                    if not timed and chunk.token_ids:
                        timed = True
                        times = SchedulerTimes(queued, entered, time.monotonic())
                        chunk = dataclasses.replace(chunk, times=times)
                    yield chunk
        finally:
            stats.num_running -= 1
            stats.used_tokens -= held
            if stats.num_running == 0:
                self._idle_since = time.monotonic()
            self._slots.release()

    async def _steps(self, request: GenerationRequest) -> AsyncGenerator[TokenChunk, None]:
        config = self.config
        eos = self._tokenizer.eos_token_id
        limit = request.max_new_tokens
        if limit is None:
            limit = max(0, config.context_length - len(request.input_ids))
        natural = None
        if not request.ignore_eos:
            natural = NATURAL_MIN_TOKENS + prompt_offset(request.input_ids) % NATURAL_SPAN
        target = limit if natural is None else min(limit, natural)
        if target == 0:
            yield TokenChunk((), finish=FinishReason("length", length=limit))
            return
        deadline = time.monotonic() + config.prefill_s
        produced = 0
        for index, size in enumerate(self._chunk_sizes()):
            count = min(size, target - produced)
            ids = self._tokenizer.output_ids(request.input_ids, produced, count)
            produced += count
            finish = None
            if natural is not None and produced == natural:
                ids[-1] = eos
                finish = FinishReason("stop", matched=eos)
            elif produced == limit:
                finish = FinishReason("length", length=limit)
            verify = index > 0 and config.speculative is not None
            accepts = (count - 1,) if verify else ()
            if index > 0:
                deadline += count * config.decode_s
            delay = deadline - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if self._stopping:
                # Checked once per step: ends streams within one step of a shutdown.
                yield TokenChunk((), finish=SHUTDOWN_ABORT)
                return
            self._account(count, accepts)
            yield TokenChunk(tuple(ids), draft_accepts=accepts, finish=finish)
            if finish is not None:
                return

    def _chunk_sizes(self) -> Iterator[int]:
        yield 1  # the prefill forward produces the first token
        spec = self.config.speculative
        if spec is None:
            while True:
                yield 1
        # Bresenham-style: sizes floor/ceil around the accept length, averaging exactly to it.
        rate = min(max(spec.accept_length, 1.0), float(spec.num_draft_tokens))
        step = 0
        while True:
            step += 1
            yield max(1, math.floor(step * rate) - math.floor((step - 1) * rate))

    def _account(self, count: int, accepts: tuple[int, ...]) -> None:
        stats = self._stats
        stats.window_tokens += count
        if accepts:
            spec = self.config.speculative
            assert spec is not None
            stats.window_verify += len(accepts)
            stats.window_spec_tokens += count
            stats.window_correct += sum(accepts)
            stats.window_proposed += len(accepts) * (spec.num_draft_tokens - 1)
            stats.verify_calls_total += len(accepts)
        # Running requests share one batched iteration, as in a real decode loop.
        stats.window_iterations += 1.0 / max(1, stats.num_running)
        if stats.window_iterations >= self.config.decode_log_interval:
            self._fold_window(time.monotonic())

    def _fold_window(self, now: float) -> None:
        self._log.info(self._stats.fold_window(now, self.config))

    def _log_prefill(self, request: GenerationRequest) -> None:
        stats = self._stats
        usage = stats.used_tokens / self.config.max_total_num_tokens
        self._log.info(
            "Prefill batch, #new-seq: 1, #new-token: %d, #cached-token: 0, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d",
            len(request.input_ids),
            usage,
            stats.num_running - 1,
            stats.num_queued,
        )
