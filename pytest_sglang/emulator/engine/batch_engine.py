"""The batch engine: continuous batching and EAGLE speculation, timed by the performance model.

One asyncio task runs the scheduler loop: ask ``BatchScheduler.plan`` for the next forward
(a prefill of newly admitted requests, a decode step of the running batch, or a speculative
draft+verify cycle), sleep for its cost from ``perf_model`` (divided by
``--emulator-speedup``, times the ``--emulator-noise`` factor), apply it, and hand every request
of the batch its new tokens at once: one chunk appended to each request's queue and one future
resolved per request. Requests wait for nothing else; there is no per-token timer.

Timing is deadline-based: a forward starts when the previous one ended *in the model's
schedule*, not when the loop got round to it, so the time the event loop spends on HTTP work
(parsing requests, the chunks' JSON, SSE and socket writes) does not slow the model down. In
SGLang that work runs in other processes (tokenizer manager, detokenizer) and never delays
the scheduler; here it shares one event loop, so after a burst of it (250 requests arriving
at once) the following forwards run back to back until the schedule is caught up. A prefill
never starts, in the schedule, before the newest request in it arrived. If the loop falls
more than ``MAX_LAG`` seconds behind (a CPU-bound emulator: too much load for the speed-up),
the schedule restarts from now and the shortfall is counted; the shutdown summary (log line
and trace) reports it.

Chunks that pile up for a request whose consumer is slow are coalesced into one when it reads
them, as SGLang's tokenizer manager coalesces pending outputs.

Scheduler-side counters (``ServerStats.scheduler``) are kept as SGLang keeps them: running and
queued requests and KV tokens after every forward; generation throughput and speculative
acceptance folded every ``--decode-log-interval`` decode forwards, with SGLang's "Decode
batch" log line.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import deque
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.emulator.engine.adaptive import AdaptiveSteps
from pytest_sglang.emulator.engine.batch_scheduler import (
    DONE,
    BatchScheduler,
    Emission,
    Forward,
    SeqState,
)
from pytest_sglang.emulator.engine.engine import (
    FinishReason,
    GenerationRequest,
    SchedulerTimes,
    SpecConfig,
    TokenChunk,
)
from pytest_sglang.emulator.engine.perf_model import (
    DEFAULT_PARAMS,
    PerfParams,
    SpecShape,
    SpeedNoise,
)
from pytest_sglang.emulator.engine.power import PowerMeter
from pytest_sglang.emulator.engine.simple_engine import (
    NATURAL_MIN_TOKENS,
    NATURAL_SPAN,
    SHUTDOWN_ABORT,
)
from pytest_sglang.emulator.engine.stats import SchedulerStats
from pytest_sglang.emulator.engine.tokenizer import Tokenizer, prompt_offset
from pytest_sglang.emulator.engine.trace import TraceRecord, TraceWriter

__all__ = ["MAX_LAG", "BatchEngine", "BatchEngineConfig"]

#: Seconds the loop may fall behind the model's schedule before the schedule restarts.
MAX_LAG = 0.5
#: Output ids are generated in blocks of this many tokens (one prompt hash per block).
_ID_BLOCK = 512


@dataclass(frozen=True)
class BatchEngineConfig:
    """Limits, cost model, speculation and timing knobs of the batch engine."""

    max_running_requests: int
    max_total_num_tokens: int
    context_length: int
    params: PerfParams = field(default_factory=lambda: DEFAULT_PARAMS)
    prefill_budget: int = 8192
    decode_log_interval: int = 40
    cuda_graph: bool = True
    speculative: SpecConfig | None = None
    topk: int = 1
    #: ``--speculative-adaptive``: the step choice per batch size (stateful, one per engine).
    adaptive: AdaptiveSteps | None = field(default=None, compare=False)
    speedup: float = 1.0
    noise: float = 0.0
    noise_interval: float = 0.5
    seed: int = 0

    @property
    def spec_shape(self) -> SpecShape | None:
        """The speculation shape the cost model uses, or ``None`` without speculation."""
        spec = self.speculative
        if spec is None:
            return None
        tokens = max(1, spec.num_draft_tokens)
        return SpecShape(
            num_steps=max(1, spec.num_steps),
            topk=max(1, self.topk),
            num_draft_tokens=tokens,
            accept_length=min(max(spec.accept_length, 1.0), float(tokens)),
        )


class _Handle:
    """One request's side of the engine: its queue of chunks and what the chunks need."""

    __slots__ = (
        "chunks",
        "counts",
        "forward_entry",
        "ids",
        "limit",
        "natural",
        "received",
        "request",
        "seq",
        "timed",
        "times",
        "waiter",
    )

    def __init__(
        self, request: GenerationRequest, limit: int, natural: int | None, received: float
    ) -> None:
        self.request = request
        self.limit = limit
        self.natural = natural
        self.received = received
        self.chunks: deque[TokenChunk] = deque()
        self.waiter: asyncio.Future[None] | None = None
        self.ids: list[int] = []
        self.times: list[float] = []
        self.counts: list[int] = []
        self.seq: SeqState | None = None
        #: When its first prefill forward began (loop time), and whether its first chunk
        #: with tokens carried the scheduler times yet.
        self.forward_entry: float | None = None
        self.timed = False


class BatchEngine:
    """Continuous batching with a performance model; see the module docstring."""

    def __init__(
        self,
        config: BatchEngineConfig,
        stats: SchedulerStats,
        tokenizer: Tokenizer,
        log: logging.Logger,
        trace: TraceWriter | None = None,
        power: PowerMeter | None = None,
    ) -> None:
        self.config = config
        self._stats = stats
        self._tokenizer = tokenizer
        self._log = log
        self._trace = trace
        #: The fake GPUs' power (``--emulator-gpu-dir``): busy during forwards, idle between.
        self.power = power
        self._spec = config.spec_shape
        self.scheduler = BatchScheduler(
            config.params,
            max_running=max(1, config.max_running_requests),
            max_total_tokens=max(1, config.max_total_num_tokens),
            prefill_budget=max(1, config.prefill_budget),
            spec=self._spec,
            rng=random.Random(f"{config.seed}/accept"),
            adaptive=config.adaptive,
        )
        self._noise = SpeedNoise(config.noise, config.seed, config.noise_interval)
        self._speedup = config.speedup
        self._handles: set[_Handle] = set()
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._started_at = time.monotonic()
        # What the shutdown summary reports.
        self.forwards = 0
        self.tokens = 0
        self.model_seconds = 0.0
        self.busy_seconds = 0.0
        self.max_lag = 0.0
        self.lag_resets = 0
        self.lost_seconds = 0.0
        stats.window_start = self._started_at

    @property
    def trace(self) -> TraceWriter | None:
        """The ground-truth trace writer (``--emulator-trace``), if any."""
        return self._trace

    # -- Engine protocol -------------------------------------------------------------------

    async def start(self) -> None:
        """Start the scheduler loop."""
        if self._task is None:
            self._started_at = time.monotonic()
            self._task = asyncio.create_task(self._loop(), name="emulator-batch-engine")

    async def stop(self) -> None:
        """End every running and queued request with finish ``abort``; stop the loop."""
        if self._stopping:
            return
        self._stopping = True
        for handle in list(self._handles):
            self._push(handle, TokenChunk((), finish=SHUTDOWN_ABORT))
        task = self._task
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._summary()

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[TokenChunk, None]:
        """Queue ``request``; yield its chunks as forwards produce them (see the module doc)."""
        loop = asyncio.get_running_loop()
        received = loop.time()
        config = self.config
        limit = request.max_new_tokens
        if limit is None:
            limit = max(0, config.context_length - len(request.input_ids))
        natural = None
        if not request.ignore_eos:
            natural = NATURAL_MIN_TOKENS + prompt_offset(request.input_ids) % NATURAL_SPAN
        target = limit if natural is None else min(limit, natural)
        if self._stopping:
            yield TokenChunk((), finish=SHUTDOWN_ABORT)
            return
        if target == 0:
            yield TokenChunk((), finish=FinishReason("length", length=limit))
            return
        handle = _Handle(request, limit, natural, received)
        seq = SeqState(
            max(1, len(request.input_ids)), target, owner=handle, cached=request.cached_tokens
        )
        handle.seq = seq
        self._handles.add(handle)
        self.scheduler.submit(seq)
        self._stats.num_queued = len(self.scheduler.waiting)
        self._wakeup.set()
        finish: FinishReason | None = None
        try:
            chunks = handle.chunks
            while True:
                while not chunks:
                    waiter = loop.create_future()
                    handle.waiter = waiter
                    await waiter
                chunk = chunks.popleft() if len(chunks) == 1 else _coalesce(chunks)
                if chunk.finish is not None:
                    finish = chunk.finish
                yield chunk
                if finish is not None:
                    return
        finally:
            handle.waiter = None
            self._handles.discard(handle)
            if seq.state != DONE:
                self.scheduler.cancel(seq)
                self._sync_stats()
            if self._trace is not None:
                self._trace.finished(
                    TraceRecord(
                        rid=request.rid,
                        received=received,
                        prompt_tokens=len(request.input_ids),
                        completion_tokens=seq.produced,
                        finish=None if finish is None else finish.type,
                        verify_ct=seq.verify_ct,
                        times=handle.times,
                        counts=handle.counts,
                    )
                )

    # -- the scheduler loop ----------------------------------------------------------------

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        clock = loop.time
        sched = self.scheduler
        stats = self._stats
        speedup = self._speedup
        next_start: float | None = None
        while True:
            forward = sched.plan()
            if forward is None:
                self._sync_stats()
                if self.power is not None:
                    self.power.idle()
                idle_from = clock()
                self._wakeup.clear()
                await self._wakeup.wait()
                # Idle time is not decode time: keep it out of the throughput window.
                stats.window_start += clock() - idle_from
                next_start = None
                continue
            self._sync_stats()
            if forward.kind == "prefill":
                self._log_prefill(forward)
            now = clock()
            if next_start is None:
                start = now
            elif now - next_start > MAX_LAG:
                self.lag_resets += 1
                self.lost_seconds += now - next_start
                start = now
            else:
                start = next_start
                self.max_lag = max(self.max_lag, now - start)
            if forward.kind == "prefill":
                start = max(start, _latest_arrival(forward))
                for seq in forward.seqs:
                    owner = seq.owner
                    if isinstance(owner, _Handle) and owner.forward_entry is None:
                        owner.forward_entry = start
            model_time = (now - self._started_at) * speedup
            cost = forward.cost_ms / 1000.0 * self._noise.factor(model_time)
            self.model_seconds += cost
            end = start + cost / speedup
            self.busy_seconds += cost / speedup
            if self.power is not None:
                self.power.forward(forward.tokens)
            delay = end - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            emissions = sched.complete(forward)
            self._deliver(forward, emissions, clock())
            self._sync_stats()
            next_start = end

    def _deliver(self, forward: Forward, emissions: list[Emission], now: float) -> None:
        self.forwards += 1
        tokenizer = self._tokenizer
        tracing = self._trace is not None
        emitted = 0
        correct = 0
        for seq, count, accepted in emissions:
            handle = seq.owner
            assert isinstance(handle, _Handle)
            produced = seq.produced
            ids = handle.ids
            while len(ids) < produced:
                ids.extend(
                    tokenizer.output_ids(
                        handle.request.input_ids, len(ids), min(_ID_BLOCK, seq.target - len(ids))
                    )
                )
            new = ids[produced - count : produced]
            finish = None
            if seq.state == DONE:
                if handle.natural is not None and produced == handle.natural:
                    new[-1] = tokenizer.eos_token_id
                    finish = FinishReason("stop", matched=tokenizer.eos_token_id)
                else:
                    finish = FinishReason("length", length=handle.limit)
            times = None
            if not handle.timed and new:
                handle.timed = True
                entry = handle.forward_entry if handle.forward_entry is not None else now
                # Loop time to time.monotonic() (they differ under uvloop).
                shift = time.monotonic() - now
                times = SchedulerTimes(handle.received + shift, entry + shift, now + shift)
            chunk = TokenChunk(
                tuple(new),
                draft_accepts=(accepted,) if accepted >= 0 else (),
                finish=finish,
                times=times,
            )
            if tracing:
                handle.times.append(now)
                handle.counts.append(count)
            emitted += count
            if accepted > 0:
                correct += accepted
            self._push(handle, chunk)
        self.tokens += emitted
        self._account(forward, len(emissions), emitted, correct, now)

    @staticmethod
    def _push(handle: _Handle, chunk: TokenChunk) -> None:
        handle.chunks.append(chunk)
        waiter = handle.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- counters and log lines --------------------------------------------------------------

    def _sync_stats(self) -> None:
        stats = self._stats
        sched = self.scheduler
        stats.num_running = len(sched.running)
        stats.num_queued = len(sched.waiting)
        stats.used_tokens = sched.used_tokens

    def _account(
        self, forward: Forward, requests: int, emitted: int, correct: int, now: float
    ) -> None:
        stats = self._stats
        stats.window_tokens += emitted
        if forward.kind == "prefill":
            return
        if forward.kind == "verify":
            stats.window_verify += requests
            stats.window_spec_tokens += emitted
            stats.window_correct += correct
            stats.window_proposed += requests * (forward.draft_tokens - 1)
            stats.verify_calls_total += requests
        stats.window_iterations += 1
        if stats.window_iterations >= self.config.decode_log_interval:
            self._fold_window(now)

    def _fold_window(self, now: float) -> None:
        self._log.info(self._stats.fold_window(now, self.config))

    def _log_prefill(self, forward: Forward) -> None:
        if not self._log.isEnabledFor(logging.INFO):
            return
        stats = self._stats
        self._log.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: %.2f, "
            "#running-req: %d, #queue-req: %d",
            len(forward.seqs),
            forward.tokens,
            stats.used_tokens / max(1, self.config.max_total_num_tokens),
            stats.num_running - len(forward.seqs),
            stats.num_queued,
        )

    def summary(self) -> dict[str, Any]:
        """Return the engine's own figures: forwards, tokens, model and wall time, schedule lag."""
        wall = time.monotonic() - self._started_at
        return {
            "forwards": self.forwards,
            "tokens": self.tokens,
            "speedup": self._speedup,
            "model_seconds": round(self.model_seconds, 6),
            "busy_wall_seconds": round(self.busy_seconds, 6),
            "wall_seconds": round(wall, 6),
            "max_lag_ms": round(self.max_lag * 1000.0, 3),
            "lag_resets": self.lag_resets,
            "lost_seconds": round(self.lost_seconds, 6),
        }

    def _summary(self) -> None:
        figures = self.summary()
        self._log.info(
            "Emulator batch engine: %d forwards, %d tokens, %.1f s of model time in %.1f s "
            "(speed-up %g); max lag behind the model %.1f ms, %d schedule restarts "
            "(%.3f s lost)",
            figures["forwards"],
            figures["tokens"],
            figures["model_seconds"],
            figures["wall_seconds"],
            figures["speedup"],
            figures["max_lag_ms"],
            figures["lag_resets"],
            figures["lost_seconds"],
        )
        if self._trace is not None:
            if self.power is not None:
                # The ground truth of the fake GPUs' energy: (monotonic time, joules of all).
                self.power.idle()
                figures["energy_log"] = [[t, e] for t, e in self.power.log]
            self._trace.summary(figures)
            self._trace.close()


def _latest_arrival(forward: Forward) -> float:
    """When the newest request of a prefill forward reached the engine (loop time)."""
    latest = 0.0
    for seq in forward.seqs:
        handle = seq.owner
        if isinstance(handle, _Handle) and handle.received > latest:
            latest = handle.received
    return latest


def _coalesce(chunks: deque[TokenChunk]) -> TokenChunk:
    """Merge every pending chunk into one (ids, verify accepts; the last one's finish)."""
    ids: list[int] = []
    accepts: list[int] = []
    finish: FinishReason | None = None
    times: SchedulerTimes | None = None
    while chunks:
        chunk = chunks.popleft()
        ids.extend(chunk.token_ids)
        accepts.extend(chunk.draft_accepts)
        times = times or chunk.times
        if chunk.finish is not None:
            finish = chunk.finish
            break
    return TokenChunk(tuple(ids), draft_accepts=tuple(accepts), finish=finish, times=times)
