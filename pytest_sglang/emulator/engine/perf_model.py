"""The performance model: what one forward of the emulated GPU costs (pure, no I/O).

Every forward costs a fixed part plus a part linear in the tokens it processes; the batch
engine (``batch_engine``) sleeps for these costs, and ``batch_scheduler`` decides which
forward runs next. All times are milliseconds of *model* time; ``--emulator-speedup`` divides
them and ``--emulator-noise`` multiplies them by a slowly varying factor (``SpeedNoise``).

Forwards
--------
- decode (no speculation): one token for each of the ``B`` running requests::

      T_step(n) = step_base + step_per_token * n,        n = B

- prefill (extend): ``n`` prompt tokens of newly admitted requests, which also yields each
  request's first token (a separate, cheaper slope: prefill is compute-bound, decode is not)::

      T_prefill(n) = prefill_base + prefill_per_token * n  (+ one draft step under speculation)

- EAGLE/EAGLE3 cycle: ``num_steps`` draft steps over ``B * topk`` tokens, then one verify
  forward of the target over the ``B * num_draft_tokens`` drafted tokens, priced like a decode
  step over that many tokens; each request then commits its accepted tokens (bonus included,
  1 to ``num_draft_tokens``, mean ``accept_length``)::

      T_draft(B) = draft_base + draft_per_token * B * topk
      T_cycle(B) = num_steps * T_draft(B) + T_step(B * num_draft_tokens)

Why speculation wins at C=1 and loses at C=250 (``docs/emulator.md``): at ``B = 1`` the verify of 4
tokens costs little more than a decode step, so ``tau = 2`` tokens per cycle pay for the draft
steps; at ``B = 48`` the verify processes 192 tokens and costs ~18 decode steps' marginal
cost, far more than the 2 tokens per request it commits.

The default constants are solved from four measured throughput targets: ``docs/emulator.md``,
"Calibration", gives the derivation and the figures.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = [
    "DEFAULT_PARAMS",
    "PerfParams",
    "SpecShape",
    "SpeedNoise",
    "acceptance_rate",
    "break_even_accept_length",
    "cycle_ms",
    "decode_ms",
    "draft_ms",
    "draw_accepted",
    "expected_cycles",
    "forward_ms",
    "prefill_ms",
    "single_stream_throughput",
    "steady_throughput",
    "verify_ms",
]


@dataclass(frozen=True)
class PerfParams:
    """The cost constants of the performance model, in milliseconds of model time."""

    step_base_ms: float = 9.52
    step_per_token_ms: float = 1.254
    prefill_base_ms: float = 15.0
    prefill_per_token_ms: float = 0.05
    draft_base_ms: float = 1.98
    draft_per_token_ms: float = 0.071

    def __post_init__(self) -> None:
        for name in (
            "step_base_ms",
            "step_per_token_ms",
            "prefill_base_ms",
            "prefill_per_token_ms",
            "draft_base_ms",
            "draft_per_token_ms",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"PerfParams.{name} must be a finite number >= 0, got {value!r}")


DEFAULT_PARAMS = PerfParams()


@dataclass(frozen=True)
class SpecShape:
    """Speculative decoding as the cost model sees it (EAGLE/EAGLE3 chain or tree)."""

    num_steps: int
    topk: int
    num_draft_tokens: int
    accept_length: float

    def __post_init__(self) -> None:
        if self.num_steps < 1 or self.topk < 1 or self.num_draft_tokens < 1:
            raise ValueError(f"speculative shape needs positive sizes, got {self}")
        if not 1.0 <= self.accept_length <= self.num_draft_tokens:
            raise ValueError(
                f"accept_length must be between 1 and num_draft_tokens "
                f"({self.num_draft_tokens}), got {self.accept_length}"
            )


def forward_ms(params: PerfParams, tokens: int) -> float:
    """One target-model forward over ``tokens`` tokens (decode or verify): base + linear."""
    return params.step_base_ms + params.step_per_token_ms * tokens


def decode_ms(params: PerfParams, batch: int) -> float:
    """One decode step of ``batch`` running requests (one token each)."""
    return forward_ms(params, batch)


def draft_ms(params: PerfParams, batch: int, topk: int = 1) -> float:
    """One draft-model step for ``batch`` requests drafting ``topk`` branches each."""
    return params.draft_base_ms + params.draft_per_token_ms * batch * topk


def verify_ms(params: PerfParams, batch: int, spec: SpecShape) -> float:
    """Cost of the target's verify forward over ``batch * num_draft_tokens`` drafted tokens."""
    return forward_ms(params, batch * spec.num_draft_tokens)


def cycle_ms(params: PerfParams, batch: int, spec: SpecShape) -> float:
    """One speculative cycle: ``num_steps`` draft steps, then the verify forward."""
    return spec.num_steps * draft_ms(params, batch, spec.topk) + verify_ms(params, batch, spec)


def prefill_ms(
    params: PerfParams, tokens: int, requests: int = 1, spec: SpecShape | None = None
) -> float:
    """Cost of a prefill (extend) forward of ``tokens`` prompt tokens from ``requests`` requests.

    Under speculation the draft model extends over the same requests: one more draft step.
    """
    cost = params.prefill_base_ms + params.prefill_per_token_ms * tokens
    if spec is not None:
        cost += draft_ms(params, requests, spec.topk)
    return cost


def acceptance_rate(accept_length: float, num_draft_tokens: int) -> float:
    """Return the per-position acceptance probability ``a`` giving mean ``accept_length``.

    Drafted tokens are accepted in order, each with probability ``a`` given the previous one
    was, up to ``num_draft_tokens - 1`` drafts, plus the bonus token:
    ``E[accepted] = 1 + a + ... + a**(N-1)``. Solved by bisection (monotone in ``a``).
    """
    n = num_draft_tokens
    if accept_length <= 1.0 or n <= 1:
        return 0.0
    if accept_length >= n:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if sum(mid**i for i in range(n)) < accept_length:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def draw_accepted(rng: random.Random, rate: float, num_draft_tokens: int) -> int:
    """Tokens one request commits in one verify: 1 (the bonus) plus the accepted drafts."""
    accepted = 1
    while accepted < num_draft_tokens and rng.random() < rate:
        accepted += 1
    return accepted


def _accepted_distribution(rate: float, num_draft_tokens: int) -> list[float]:
    """P(commit k tokens) for k = 1..N (index k - 1)."""
    probs = []
    for k in range(1, num_draft_tokens + 1):
        reach = rate ** (k - 1)
        probs.append(reach * (1 - rate) if k < num_draft_tokens else reach)
    return probs


def expected_cycles(tokens: int, spec: SpecShape) -> float:
    """Return the expected verify cycles to commit ``tokens`` tokens (the last may be short).

    A renewal computation over the accepted-length distribution: ``E[c(m)] = 1 + sum_k p_k
    E[c(m - k)]`` with ``E[c(m <= 0)] = 0``.
    """
    probs = _accepted_distribution(
        acceptance_rate(spec.accept_length, spec.num_draft_tokens), spec.num_draft_tokens
    )
    expected = [0.0] * (tokens + 1)
    for m in range(1, tokens + 1):
        expected[m] = 1.0 + sum(
            p * expected[m - k] for k, p in enumerate(probs, start=1) if m - k > 0
        )
    return expected[tokens]


def single_stream_throughput(
    params: PerfParams, input_len: int, output_len: int, spec: SpecShape | None = None
) -> float:
    """Output tok/s of one request at a time (C=1), network and client costs excluded."""
    first = prefill_ms(params, input_len, 1, spec)
    rest = output_len - 1
    if spec is None:
        total = first + rest * decode_ms(params, 1)
    else:
        total = first + expected_cycles(rest, spec) * cycle_ms(params, 1, spec)
    return output_len / total * 1000.0


def steady_throughput(params: PerfParams, batch: int, spec: SpecShape | None = None) -> float:
    """Output tok/s of ``batch`` requests decoding together, prefills excluded."""
    if spec is None:
        return batch / decode_ms(params, batch) * 1000.0
    return batch * spec.accept_length / cycle_ms(params, batch, spec) * 1000.0


def break_even_accept_length(params: PerfParams, batch: int, spec: SpecShape) -> float:
    """Return the acceptance length at which speculation only breaks even at ``batch``."""
    return cycle_ms(params, batch, spec) / decode_ms(params, batch)


class SpeedNoise:
    """A slowly varying random speed factor with mean 1 (flicker noise; ``--emulator-noise``).

    The logarithm of the factor is a sum of ``OCTAVES`` piecewise-constant terms; term ``j``
    is re-drawn (Gaussian) every ``interval * 2**j`` seconds of model time (Voss-McCartney),
    so the fastest term changes every ``interval`` (0.5 s by default) and the slowest every
    ~17 minutes. Such 1/f noise has an Allan deviation that hardly depends on the averaging
    time: the mean speed of one benchmark run differs from the next run's by about the same
    relative amount whether runs last 2 s or 5 min, which is what run-to-run noise on a real
    GPU looks like. The per-term deviation is scaled so that this run-to-run deviation is
    ``cv`` (``ALLAN_SCALE``, measured by simulation); each run's factor is lognormal.

    ``cv = 0`` gives exactly 1.0 and draws nothing.
    """

    OCTAVES = 12
    #: Allan deviation of the sum per unit per-term deviation, for windows of 3 to 300
    #: intervals (1.5 s to 2.5 min of model time); measured by simulation: 1.36-1.41.
    ALLAN_SCALE = 1.39

    def __init__(self, cv: float, seed: int | str = 0, interval: float = 0.5) -> None:
        if cv < 0 or not math.isfinite(cv):
            raise ValueError(f"noise CV must be a finite number >= 0, got {cv!r}")
        if interval <= 0:
            raise ValueError(f"noise interval must be > 0, got {interval!r}")
        self.cv = cv
        self.interval = interval
        self._rng = random.Random(f"{seed}/noise")
        # Deviation of log(factor) across runs ~ cv for small cv; log-normal keeps it > 0.
        self._sigma = math.sqrt(math.log1p(cv * cv)) / self.ALLAN_SCALE
        self._terms = [0.0] * self.OCTAVES
        self._tick = -1
        self._factor = 1.0

    def factor(self, model_time: float) -> float:
        """Return the speed factor (it multiplies forward costs) at ``model_time`` seconds."""
        if self.cv == 0.0:
            return 1.0
        tick = int(model_time / self.interval)
        if tick != self._tick:
            self._advance(tick)
        return self._factor

    def _advance(self, tick: int) -> None:
        previous = self._tick
        for j in range(self.OCTAVES):
            period = 1 << j
            if previous < 0 or tick // period != previous // period:
                self._terms[j] = self._rng.gauss(0.0, self._sigma)
        self._tick = tick
        total_var = self.OCTAVES * self._sigma**2
        self._factor = math.exp(sum(self._terms) - total_var / 2)
