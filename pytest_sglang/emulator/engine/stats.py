"""Counters and histograms that ``/metrics`` and ``/server_info`` read.

Two sides, as in SGLang: the scheduler side (running/queued requests, decode-window throughput
and speculative acceptance, written by the engine) and the tokenizer side (per-request totals
and latency histograms, written when a request finishes). Bucket bounds are SGLang's
(``sglang-metrics-0.5.23.prom``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

TTFT_BUCKETS = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
    200.0, 400.0,
)  # fmt: skip
ITL_BUCKETS = (
    0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06, 0.08, 0.1,
    0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0,
)  # fmt: skip
#: ``queue_time_seconds`` (0.5.23).
QUEUE_BUCKETS = (
    0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0,
    30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0,
    800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0,
)  # fmt: skip
#: SGLang's end-to-end buckets are the TTFT ones and four longer.
E2E_BUCKETS = (*TTFT_BUCKETS, 600.0, 1200.0, 1800.0, 2400.0)
TOKEN_BUCKETS = (
    100.0, 300.0, 500.0, 700.0, 1000.0, 1500.0, 2000.0, 3000.0, 4000.0, 5000.0, 6000.0, 7000.0,
    8000.0, 9000.0, 10000.0, 12500.0, 15000.0, 17500.0, 20000.0, 22500.0, 25000.0, 27500.0,
    30000.0, 35000.0, 40000.0, 60000.0, 80000.0, 100000.0, 200000.0, 300000.0, 400000.0,
    600000.0, 800000.0, 1000000.0, 1100000.0,
)  # fmt: skip


class Histogram:
    """A Prometheus histogram: per-bucket counts, sum and count."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float, times: int = 1) -> None:
        """Record ``value`` ``times`` times."""
        index = len(self.bounds)
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                index = i
                break
        self._counts[index] += times
        self.sum += value * times
        self.count += times

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, cumulative count)`` pairs, ending with ``(inf, count)``."""
        total = 0
        result = []
        for bound, count in zip((*self.bounds, float("inf")), self._counts, strict=True):
            total += count
            result.append((bound, total))
        return result


class EngineShape(Protocol):
    """What the decode-log line needs of an engine's configuration."""

    @property
    def speculative(self) -> object | None: ...
    @property
    def cuda_graph(self) -> bool: ...
    @property
    def max_total_num_tokens(self) -> int: ...


@dataclass
class SchedulerStats:
    """Scheduler-side state; the engine writes it, metrics and ``internal_states`` read it."""

    num_running: int = 0
    num_queued: int = 0
    used_tokens: int = 0
    # Folded in every decode-log window, like SGLang's gauges.
    gen_throughput: float = 0.0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    windows_folded: int = 0
    cum_spec_tokens: int = 0
    cum_verify: int = 0
    verify_calls_total: int = 0
    # The open window.
    window_iterations: float = 0.0
    window_tokens: int = 0
    window_spec_tokens: int = 0
    window_verify: int = 0
    window_correct: int = 0
    window_proposed: int = 0
    window_start: float = 0.0

    def fold_window(self, now: float, config: EngineShape) -> str:
        """Close the decode-log window at ``now``: update the gauges, start a new window.

        Returns SGLang's ``Decode batch, ...`` log line for the window.
        """
        speculative = config.speculative is not None
        max_total_num_tokens = config.max_total_num_tokens
        elapsed = now - self.window_start
        if elapsed > 0:
            self.gen_throughput = self.window_tokens / elapsed
        parts = [
            f"Decode batch, #running-req: {self.num_running}",
            f"#token: {self.used_tokens}",
            f"token usage: {self.used_tokens / max(1, max_total_num_tokens):.2f}",
        ]
        if speculative and self.window_verify:
            self.spec_accept_length = self.window_spec_tokens / self.window_verify
            self.spec_accept_rate = self.window_correct / max(1, self.window_proposed)
            self.cum_spec_tokens += self.window_spec_tokens
            self.cum_verify += self.window_verify
            parts.append(f"accept len: {self.spec_accept_length:.2f}")
            parts.append(f"accept rate: {self.spec_accept_rate:.2f}")
        parts.append(f"cuda graph: {config.cuda_graph}")
        parts.append(f"gen throughput (token/s): {self.gen_throughput:.2f}")
        parts.append(f"#queue-req: {self.num_queued}")
        self.windows_folded += 1
        self.window_iterations = 0.0
        self.window_tokens = 0
        self.window_spec_tokens = 0
        self.window_verify = 0
        self.window_correct = 0
        self.window_proposed = 0
        self.window_start = now
        return ", ".join(parts)

    @property
    def avg_spec_accept_length(self) -> float | None:
        """Accepted tokens per verify since start; ``None`` until a window with verifies folded."""
        if self.cum_verify == 0:
            return None
        return self.cum_spec_tokens / self.cum_verify


def _by_streaming() -> dict[bool, int]:
    return {}


@dataclass
class TokenizerStats:
    """Tokenizer-side totals and histograms, per ``is_streaming`` where SGLang labels them."""

    prompt_tokens: dict[bool, int] = field(default_factory=_by_streaming)
    generation_tokens: dict[bool, int] = field(default_factory=_by_streaming)
    requests: dict[bool, int] = field(default_factory=_by_streaming)
    ttft: dict[bool, Histogram] = field(default_factory=dict)
    e2e: dict[bool, Histogram] = field(default_factory=dict)
    tpot: dict[bool, Histogram] = field(default_factory=dict)
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    prompt_tokens_hist: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    generation_tokens_hist: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    # Any output reaching the tokenizer side, health probes included: /health_generate's signal.
    output_events: int = 0
    #: Queueing seconds per request (SGLang's scheduler-side ``queue_time_seconds``).
    queue_time: Histogram = field(default_factory=lambda: Histogram(QUEUE_BUCKETS))
    #: Prefix-cache hits (``cached_tokens_total``) and the prompt tokens computed.
    cached_tokens: int = 0
    uncached_prompt_tokens_hist: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))

    def record_finished(
        self,
        *,
        streaming: bool,
        prompt_tokens: int,
        completion_tokens: int,
        ttft: float | None,
        e2e: float,
        tpot: float | None,
        queue_time: float | None = None,
        cached_tokens: int = 0,
    ) -> None:
        """Fold one finished request into the totals and histograms."""
        if queue_time is not None:
            self.queue_time.observe(queue_time)
        self.cached_tokens += cached_tokens
        self.uncached_prompt_tokens_hist.observe(max(0, prompt_tokens - cached_tokens))
        key = streaming
        self.prompt_tokens[key] = self.prompt_tokens.get(key, 0) + prompt_tokens
        self.generation_tokens[key] = self.generation_tokens.get(key, 0) + completion_tokens
        self.requests[key] = self.requests.get(key, 0) + 1
        if ttft is not None:
            self.ttft.setdefault(key, Histogram(TTFT_BUCKETS)).observe(ttft)
        self.e2e.setdefault(key, Histogram(E2E_BUCKETS)).observe(e2e)
        if tpot is not None:
            self.tpot.setdefault(key, Histogram(ITL_BUCKETS)).observe(tpot)
        self.prompt_tokens_hist.observe(prompt_tokens)
        self.generation_tokens_hist.observe(completion_tokens)


@dataclass
class HttpStats:
    """HTTP requests by (path, method), responses by (path, method, status), in flight."""

    requests: dict[tuple[str, str], int] = field(default_factory=dict)
    responses: dict[tuple[str, str, str], int] = field(default_factory=dict)
    active: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass
class ServerStats:
    """Both sides together, and the HTTP server's counters."""

    scheduler: SchedulerStats = field(default_factory=SchedulerStats)
    tokenizer: TokenizerStats = field(default_factory=TokenizerStats)
    http: HttpStats = field(default_factory=HttpStats)
