"""Speculative-decoding arithmetic: break-even acceptance length, speed-up, implied cycle time.

The acceptance length ``tau`` counts the target model's own token (``tau >= 1``); speculation
wins iff ``tau`` exceeds ``tau_be = T_cycle / T_decode`` (``docs/statistics.md``,
"Speculative decoding"). Pure; times in any one unit.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pytest_sglang.verdicts.stats import require

__all__ = ["CycleEstimate", "break_even_accept_length", "estimate_cycle_time", "speedup"]


def _time(name: str, value: float, *, may_be_zero: bool = False) -> float:
    """Return ``value``, a positive finite time (or non-negative, for a part that may be absent)."""
    ok = value >= 0.0 if may_be_zero else value > 0.0
    what = "a finite non-negative number" if may_be_zero else "a positive finite number"
    require(ok and math.isfinite(value), f"{name} must be {what}, got {value!r}")
    return float(value)


def _accept_length(value: float) -> float:
    require(
        value >= 1.0 and math.isfinite(value),
        "accept_length counts the target model's own token, so it is at least 1 "
        f"(tokens per verify per request), got {value!r}",
    )
    return float(value)


def break_even_accept_length(t_cycle: float, t_decode: float, *, t_draft: float = 0.0) -> float:
    """Return ``(t_cycle + t_draft) / t_decode``: the acceptance length where speculation pays.

    ``t_cycle`` is one speculative cycle (or its verify alone, with the drafting in
    ``t_draft``), ``t_decode`` one plain decode step at the same batch size.
    """
    cycle = _time("t_cycle", t_cycle) + _time("t_draft", t_draft, may_be_zero=True)
    return cycle / _time("t_decode", t_decode)


def speedup(
    accept_length: float, t_cycle: float, t_decode: float, *, t_draft: float = 0.0
) -> float:
    """Return speculation's decode speed-up, ``tau / tau_be`` (:func:`break_even_accept_length`)."""
    tau = _accept_length(accept_length)
    return tau / break_even_accept_length(t_cycle, t_decode, t_draft=t_draft)


@dataclass(frozen=True)
class CycleEstimate:
    """What a speculative and a plain TPOT imply: cycle time, break-even and speed-up.

    ``t_cycle = accept_length * spec_tpot``, ``break_even = t_cycle / t_decode``.
    """

    t_cycle: float
    t_decode: float
    accept_length: float
    break_even: float
    speedup: float

    def as_dict(self) -> dict[str, float]:
        """Return the estimate as plain JSON types (every field by name)."""
        return asdict(self)


def estimate_cycle_time(
    *, spec_tpot: float, base_tpot: float, accept_length: float
) -> CycleEstimate:
    """Infer the speculative cycle time and break-even from two TPOTs at one concurrency."""
    spec, base = _time("spec_tpot", spec_tpot), _time("base_tpot", base_tpot)
    tau = _accept_length(accept_length)
    return CycleEstimate(tau * spec, base, tau, tau * spec / base, base / spec)
