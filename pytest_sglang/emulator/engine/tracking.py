"""One request's run through the engine, as SGLang's tokenizer manager sees it.

``RequestRun`` accumulates the output (ids, text, speculative verify counts), coalesces engine
chunks per ``--stream-interval``, timestamps the request's life as SGLang's tokenizer manager
does (received, dispatched to the scheduler, first token, first response sent, finished; the
scheduler's queue and prefill times come with the first chunk), and records the
tokenizer-side metrics when the request finishes. The native and OpenAI routes build their
responses from it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from typing import TypeVar, cast

from pytest_sglang.emulator.engine.engine import (
    Engine,
    FinishReason,
    GenerationRequest,
    SchedulerTimes,
    TokenChunk,
)
from pytest_sglang.emulator.engine.prefix_cache import PrefixCache
from pytest_sglang.emulator.engine.stats import TokenizerStats
from pytest_sglang.emulator.engine.tokenizer import Tokenizer

T = TypeVar("T")


class RequestRun:
    """Drive one ``GenerationRequest`` and keep what the responses need."""

    def __init__(
        self,
        engine: Engine,
        stats: TokenizerStats,
        tokenizer: Tokenizer,
        request: GenerationRequest,
        *,
        streaming: bool,
        stream_interval: int = 1,
        num_draft_tokens: int = 0,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        self.request = request
        self.streaming = streaming
        self._engine = engine
        self._stats = stats
        self._tokenizer = tokenizer
        self._interval = max(1, stream_interval)
        self.created = time.perf_counter()
        self.output_ids: list[int] = []
        self.text = ""
        # The tokens and text added since the previous update.
        self.delta_ids: list[int] = []
        self.delta_text = ""
        self.verify_ct = 0
        self.correct_drafts = 0
        self.accept_histogram = [0] * max(1, num_draft_tokens)
        self._cache = prefix_cache
        self.cached_tokens = 0 if prefix_cache is None else prefix_cache.match(request.input_ids)
        self.finish: FinishReason | None = None
        self.first_token_at: float | None = None
        self.finished_at: float | None = None
        #: Wall clock (``time.time()``) when the first response left (the first streamed
        #: chunk, or the whole non-streamed answer): SGLang's ``response_sent_to_client_ts``.
        self.sent_ts: float | None = None
        #: Wall clock when the request arrived, and when it was handed to the scheduler.
        self.received_ts = time.time()
        self.dispatched_ts: float | None = None
        #: The scheduler's queue and prefill times (monotonic), from the first chunk.
        self.times: SchedulerTimes | None = None
        #: Updates yielded so far (1 while the first chunk is being rendered).
        self.updates_sent = 0

    @property
    def rid(self) -> str:
        """The request id (``meta_info.id``, the OpenAI ``id``)."""
        return self.request.rid

    @property
    def prompt_tokens(self) -> int:
        """Input length in tokens."""
        return len(self.request.input_ids)

    @property
    def completion_tokens(self) -> int:
        """Tokens generated so far (cumulative)."""
        return len(self.output_ids)

    @property
    def e2e_latency(self) -> float:
        """Seconds from request creation to the end (or to now while running)."""
        end = self.finished_at if self.finished_at is not None else time.perf_counter()
        return end - self.created

    async def updates(self) -> AsyncGenerator[RequestRun, None]:
        """Yield this run each time new output is due to the client; the last has ``finish``."""
        pending: list[int] = []
        last_chunk_at = self.created
        self.dispatched_ts = time.time()
        # A cached prefix is not prefilled again: the engine computes only the rest.
        request = dataclasses.replace(self.request, cached_tokens=self.cached_tokens)
        async with aclosing(self._engine.generate(request)) as chunks:
            async for chunk in chunks:
                now = time.perf_counter()
                self._absorb(chunk, now, last_chunk_at)
                last_chunk_at = now
                pending.extend(chunk.token_ids)
                if chunk.finish is None and len(pending) < self._interval:
                    continue
                self.delta_ids = pending
                self.delta_text = self._tokenizer.decode(pending)
                self.text += self.delta_text
                pending = []
                if chunk.finish is not None:
                    self._finished(now)
                if self.streaming and self.sent_ts is None:
                    self.sent_ts = time.time()
                self.updates_sent += 1
                yield self
                if chunk.finish is not None:
                    return

    async def run_to_end(self) -> RequestRun:
        """Run without streaming; return the finished run."""
        async for _ in self.updates():
            pass
        return self

    def wall(self, perf: float) -> float:
        """``time.perf_counter()`` value ``perf`` as wall-clock time."""
        return perf + (time.time() - time.perf_counter())

    @staticmethod
    def wall_of_monotonic(mono: float) -> float:
        """``time.monotonic()`` value ``mono`` as wall-clock time."""
        return mono + (time.time() - time.monotonic())

    def mark_sent(self) -> float:
        """Stamp (once) and return when the response left.

        SGLang stamps a non-streamed request right before its answer is sent.
        """
        if self.sent_ts is None:
            self.sent_ts = time.time()
        return self.sent_ts

    def _absorb(self, chunk: TokenChunk, now: float, last_chunk_at: float) -> None:
        self._stats.output_events += 1
        if chunk.times is not None and self.times is None:
            self.times = chunk.times
        count = len(chunk.token_ids)
        if count and self.first_token_at is None:
            self.first_token_at = now
            if self._cache is not None:
                # The prompt's KV is cached once prefilled (SGLang's cache_unfinished_req), so
                # requests sharing its prefix hit it before this one finishes.
                self._cache.insert(self.request.input_ids)
        elif count and self.request.log_metrics:
            self._stats.itl.observe((now - last_chunk_at) / count, times=count)
        self.output_ids.extend(chunk.token_ids)
        for accepted in chunk.draft_accepts:
            self.verify_ct += 1
            self.correct_drafts += accepted
            if accepted < len(self.accept_histogram):
                self.accept_histogram[accepted] += 1
        if chunk.cached_tokens:
            self.cached_tokens = chunk.cached_tokens
        if chunk.finish is not None:
            self.finish = chunk.finish

    def _finished(self, now: float) -> None:
        self.finished_at = now
        if self._cache is not None:
            self._cache.insert([*self.request.input_ids, *self.output_ids])
        if not self.request.log_metrics:
            return
        ttft = None if self.first_token_at is None else self.first_token_at - self.created
        tpot = None
        if self.first_token_at is not None and self.completion_tokens > 1:
            tpot = (now - self.first_token_at) / (self.completion_tokens - 1)
        self._stats.record_finished(
            streaming=self.streaming,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            ttft=ttft,
            e2e=now - self.created,
            tpot=tpot,
            queue_time=(
                None if self.times is None else self.times.forward_entry - self.times.queued
            ),
            cached_tokens=self.cached_tokens,
        )


_END = object()


async def merged(
    runs: Sequence[RequestRun], render: Callable[[int, RequestRun], T]
) -> AsyncGenerator[T, None]:
    """Run ``runs`` concurrently; yield ``render(index, run)`` for each update as it comes.

    ``render`` is called at the moment of the update, so it sees that update's deltas even
    when another run's updates are still queued.
    """
    if len(runs) == 1:
        async with aclosing(runs[0].updates()) as updates:
            async for run in updates:
                yield render(0, run)
        return
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump(index: int, run: RequestRun) -> None:
        try:
            async with aclosing(run.updates()) as updates:
                async for update in updates:
                    queue.put_nowait(render(index, update))
        except Exception as exc:  # handed to the consumer, which re-raises it
            queue.put_nowait(exc)
        finally:
            queue.put_nowait(_END)

    tasks = [asyncio.create_task(pump(i, run)) for i, run in enumerate(runs)]
    try:
        remaining = len(tasks)
        while remaining:
            item = await queue.get()
            if item is _END:
                remaining -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield cast(T, item)
    finally:
        for task in tasks:
            task.cancel()
