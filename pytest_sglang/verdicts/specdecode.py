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


def _times(t_draft: float = 0.0, **times: float) -> list[float]:
    """Check positive finite times and a non-negative draft time; return the times."""
    for name, value in times.items():
        require(
            value > 0.0 and math.isfinite(value),
            f"{name} must be a positive finite number, got {value!r}",
        )
    require(
        t_draft >= 0.0 and math.isfinite(t_draft),
        f"t_draft must be a finite non-negative number, got {t_draft!r}",
    )
    return [float(v) for v in times.values()]


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
    cycle, decode = _times(t_draft, t_cycle=t_cycle, t_decode=t_decode)
    return (cycle + t_draft) / decode


def speedup(
    accept_length: float, t_cycle: float, t_decode: float, *, t_draft: float = 0.0
) -> float:
    """Return speculation's decode speed-up, ``tau * t_decode / (t_cycle + t_draft)``."""
    tau = _accept_length(accept_length)
    cycle, decode = _times(t_draft, t_cycle=t_cycle, t_decode=t_decode)
    return tau * decode / (cycle + t_draft)


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
    spec, base = _times(spec_tpot=spec_tpot, base_tpot=base_tpot)
    tau = _accept_length(accept_length)
    return CycleEstimate(tau * spec, base, tau, tau * spec / base, base / spec)
