"""Continuous batching as SGLang's scheduler does it, in model time (pure, no I/O, no clock).

State: a FIFO ``waiting`` queue and the ``running`` requests (at most ``max_running``). Each
call of :meth:`BatchScheduler.plan` picks the next forward, as SGLang's
``get_next_batch_to_run`` does:

1. a **prefill** (extend) forward when requests wait, a running slot is free and the KV cache
   has room: it takes waiting requests in order up to ``prefill_budget`` prompt tokens
   (``--chunked-prefill-size``); a prompt longer than what is left of the budget is prefilled
   in chunks over several forwards. Prefill has priority over decode, and mixed batches are
   not modelled (SGLang's default; EAGLE disables them anyway);
2. otherwise a **decode** step of every request whose prompt is fully prefilled (one token
   each), or under speculation a **verify** cycle (draft steps + verify; each request commits
   1 to ``num_draft_tokens`` tokens drawn around the mean acceptance length). Under adaptive
   speculation (``adaptive``) the batch size picks the draft steps ``s`` of each verify: the
   drafts are accepted with the same per-position rate, so the mean is ``1 + a + ... + a**s``,
   and ``s = 0`` is a decode step that counts as a verify (plus the draft model's extend over
   the batch, which SGLang runs by default).

:meth:`BatchScheduler.complete` applies the forward's outcome and returns the tokens each
request gained. The asyncio engine (``batch_engine``) sleeps for each forward's cost between
the two calls; :func:`simulate_closed_loop` runs the same scheduler in virtual time for the
analytic calibration checks.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pytest_sglang.emulator.engine.adaptive import AdaptiveSteps
from pytest_sglang.emulator.engine.perf_model import (
    PerfParams,
    SpecShape,
    acceptance_rate,
    cycle_ms,
    decode_ms,
    draft_ms,
    draw_accepted,
    prefill_ms,
)

__all__ = ["BatchScheduler", "Emission", "Forward", "SeqState", "SimResult", "simulate_closed_loop"]

WAITING, RUNNING, DONE = 0, 1, 2


class SeqState:
    """One request inside the scheduler: prompt progress, tokens produced, verify count."""

    __slots__ = (
        "cached",
        "input_len",
        "owner",
        "prefilled",
        "produced",
        "state",
        "target",
        "verify_ct",
    )

    def __init__(self, input_len: int, target: int, owner: object = None, cached: int = 0) -> None:
        if input_len < 1 or target < 1:
            raise ValueError(f"need input_len >= 1 and target >= 1, got {input_len}, {target}")
        self.input_len = input_len
        #: Tokens to generate in all (the request finishes when ``produced`` reaches it).
        self.target = target
        #: Prompt tokens found in the prefix cache: already in the KV cache (shared, so not
        #: this request's), never prefilled; SGLang always computes the last prompt token.
        self.cached = max(0, min(cached, input_len - 1))
        self.prefilled = self.cached
        self.produced = 0
        self.verify_ct = 0
        self.state = WAITING
        #: Whatever the caller attaches (the engine's per-request handle).
        self.owner = owner

    @property
    def kv_tokens(self) -> int:
        """Tokens this request holds in the KV cache (its cached prefix is shared)."""
        return self.prefilled - self.cached + self.produced


@dataclass
class Forward:
    """One planned forward: its kind, the requests in it and its cost in model milliseconds.

    ``tokens`` is what the target model processes (prompt tokens, the batch, or the batch
    times the draft tokens); ``chunks`` the prompt tokens of each request of a prefill.
    """

    kind: Literal["prefill", "decode", "verify"]
    seqs: list[SeqState]
    tokens: int
    cost_ms: float
    chunks: list[int] = field(default_factory=list)
    #: Tokens per request a verify checks (drafts + 1); 0 for a prefill or decode.
    draft_tokens: int = 0


class Emission(NamedTuple):
    """Tokens a request gained in one forward; ``accepted`` drafts for a verify, else -1."""

    seq: SeqState
    gained: int
    accepted: int


class BatchScheduler:
    """Waiting queue, running batch and forward planning; see the module docstring."""

    def __init__(
        self,
        params: PerfParams,
        *,
        max_running: int,
        max_total_tokens: int,
        prefill_budget: int = 8192,
        spec: SpecShape | None = None,
        rng: random.Random | None = None,
        adaptive: AdaptiveSteps | None = None,
    ) -> None:
        if max_running < 1 or max_total_tokens < 1 or prefill_budget < 1:
            raise ValueError("max_running, max_total_tokens and prefill_budget must be >= 1")
        self.params = params
        self.max_running = max_running
        self.max_total_tokens = max_total_tokens
        self.prefill_budget = prefill_budget
        self.spec = spec
        self.adaptive = adaptive
        self._rng = rng if rng is not None else random.Random(0)
        self._rate = (
            0.0 if spec is None else acceptance_rate(spec.accept_length, spec.num_draft_tokens)
        )
        self.waiting: deque[SeqState] = deque()
        #: Admitted requests (prefilling or decoding), in admission order.
        self.running: list[SeqState] = []
        #: Running requests whose prompt is fully prefilled.
        self.decoding: list[SeqState] = []
        #: A request whose prompt is prefilled in chunks, if one is in progress.
        self.partial: SeqState | None = None
        #: Tokens held in the KV cache by running requests.
        self.used_tokens = 0

    @property
    def busy(self) -> bool:
        """Whether any request waits or runs."""
        return bool(self.waiting or self.running)

    def submit(self, seq: SeqState) -> None:
        """Queue ``seq`` (FIFO)."""
        seq.state = WAITING
        self.waiting.append(seq)

    def cancel(self, seq: SeqState) -> None:
        """Drop ``seq`` wherever it is (the client went away); frees its slot and KV tokens."""
        if seq.state == WAITING:
            try:
                self.waiting.remove(seq)
            except ValueError:
                pass
        elif seq.state == RUNNING:
            self._retire(seq)
            self.decoding = [s for s in self.decoding if s is not seq]
        seq.state = DONE

    def plan(self) -> Forward | None:
        """Return the next forward, or ``None`` when there is nothing to do."""
        if self.partial is not None or self.waiting:
            forward = self._plan_prefill()
            if forward is not None:
                return forward
        batch = self.decoding
        if not batch:
            return None
        size = len(batch)
        spec = self.spec
        if spec is None:
            return Forward("decode", list(batch), size, decode_ms(self.params, size))
        if self.adaptive is not None:
            steps = self.adaptive.steps_for(size)
            if steps == 0:
                cost = decode_ms(self.params, size)
                cost += draft_ms(self.params, size) if self.adaptive.zero_step_extend else 0.0
                return Forward("verify", list(batch), size, cost, [], 1)
            if steps != spec.num_steps:
                length = sum(self._rate**i for i in range(steps + 1))
                spec = SpecShape(steps, spec.topk, steps + 1, length)
        tokens = spec.num_draft_tokens
        cost = cycle_ms(self.params, size, spec)
        return Forward("verify", list(batch), size * tokens, cost, [], tokens)

    def _plan_prefill(self) -> Forward | None:
        budget = self.prefill_budget
        seqs: list[SeqState] = []
        chunks: list[int] = []
        partial = self.partial
        if partial is not None:
            take = min(partial.input_len - partial.prefilled, budget)
            seqs.append(partial)
            chunks.append(take)
            budget -= take
        free_kv = self.max_total_tokens - self.used_tokens
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            seq = self.waiting[0]
            # Admit only what fits the KV cache, but never leave the server idle.
            fresh = seq.input_len - seq.prefilled
            if fresh > free_kv and self.running:
                break
            self.waiting.popleft()
            seq.state = RUNNING
            self.running.append(seq)
            take = min(fresh, budget)
            seqs.append(seq)
            chunks.append(take)
            budget -= take
            free_kv -= fresh
        if not seqs:
            return None
        tokens = sum(chunks)
        cost = prefill_ms(self.params, tokens, len(seqs), self.spec)
        return Forward("prefill", seqs, tokens, cost, chunks)

    def complete(self, forward: Forward) -> list[Emission]:
        """Apply ``forward``'s outcome; return the tokens each request gained, in batch order.

        Requests cancelled while the forward ran gain nothing. A request that reaches its
        target is retired (slot and KV tokens freed) before this returns.
        """
        emissions: list[Emission] = []
        finished = False
        if forward.kind == "prefill":
            self.partial = None
            for seq, take in zip(forward.seqs, forward.chunks, strict=True):
                if seq.state != RUNNING:
                    continue
                seq.prefilled += take
                self.used_tokens += take
                if seq.prefilled < seq.input_len:
                    self.partial = seq
                    continue
                seq.produced = 1
                self.used_tokens += 1
                emissions.append(Emission(seq, 1, -1))
                if seq.produced >= seq.target:
                    self._retire(seq)
                else:
                    self.decoding.append(seq)
            return emissions
        drafts = []
        for seq in forward.seqs:
            if seq.state != RUNNING:
                continue
            if forward.kind == "decode":
                count, accepted = 1, -1
            else:
                drawn = draw_accepted(self._rng, self._rate, forward.draft_tokens)
                drafts.append(drawn - 1)
                count = min(drawn, seq.target - seq.produced)
                accepted = count - 1
                seq.verify_ct += 1
            seq.produced += count
            self.used_tokens += count
            emissions.append(Emission(seq, count, accepted))
            if seq.produced >= seq.target:
                self._retire(seq)
                finished = True
        if finished:
            self.decoding = [s for s in self.decoding if s.state == RUNNING]
        if self.adaptive is not None and drafts:
            self.adaptive.observe(drafts, len(forward.seqs))
        return emissions

    def _retire(self, seq: SeqState) -> None:
        seq.state = DONE
        self.used_tokens -= seq.kv_tokens
        self.running.remove(seq)
        if self.partial is seq:
            self.partial = None


@dataclass(frozen=True)
class SimResult:
    """A simulated closed-loop run: duration (s), tokens, throughput and per-request times."""

    duration: float
    output_tokens: int
    throughput: float
    ttft: tuple[float, ...]
    e2e: tuple[float, ...]
    verify_ct: int
    forwards: int

    @property
    def acceptance_length(self) -> float | None:
        """Output tokens per verify (completion_tokens / spec_verify_ct, summed)."""
        return self.output_tokens / self.verify_ct if self.verify_ct else None


def simulate_closed_loop(
    params: PerfParams,
    *,
    concurrency: int,
    requests: int,
    input_len: int,
    output_len: int,
    max_running: int,
    spec: SpecShape | None = None,
    prefill_budget: int = 8192,
    max_total_tokens: int = 1 << 30,
    seed: int | str = 0,
    adaptive: AdaptiveSteps | None = None,
) -> SimResult:
    """Run a closed loop of ``concurrency`` clients in virtual time, clients costing nothing.

    Each client sends its next request the instant the previous one ends, until ``requests``
    were sent; the result's throughput is output tokens / (last end - first send), the
    load generator's definition.
    """
    rng = random.Random(f"{seed}/accept")
    sched = BatchScheduler(
        params,
        max_running=max_running,
        max_total_tokens=max_total_tokens,
        prefill_budget=prefill_budget,
        spec=spec,
        rng=rng,
        adaptive=adaptive,
    )
    now = 0.0
    sent_at: dict[int, float] = {}
    first: dict[int, float] = {}
    ends: list[float] = []
    ttfts: list[float] = []
    verify = 0
    forwards = 0
    sent = 0

    def send() -> None:
        nonlocal sent
        seq = SeqState(input_len, output_len, owner=sent)
        sent_at[sent] = now
        sent += 1
        sched.submit(seq)

    for _ in range(min(concurrency, requests)):
        send()
    while sched.busy:
        forward = sched.plan()
        if forward is None:  # pragma: no cover - a busy scheduler always has work
            raise RuntimeError("scheduler busy without a forward to run")
        now += forward.cost_ms / 1000.0
        forwards += 1
        for emission in sched.complete(forward):
            seq = emission.seq
            key = seq.owner
            assert isinstance(key, int)
            if key not in first:
                first[key] = now
                ttfts.append(now - sent_at[key])
            if seq.state == DONE:
                verify += seq.verify_ct
                ends.append(now - sent_at[key])
                if sent < requests:
                    send()
    total = requests * output_len
    duration = now
    return SimResult(
        duration=duration,
        output_tokens=total,
        throughput=total / duration if duration > 0 else 0.0,
        ttft=tuple(ttfts),
        e2e=tuple(ends),
        verify_ct=verify,
        forwards=forwards,
    )
