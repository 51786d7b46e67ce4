"""Speculative-decoding arithmetic: break-even acceptance length, speed-up, implied cycle time.

The acceptance length ``tau`` counts the target model's own token (``tau >= 1``); speculation
wins iff ``tau`` exceeds ``tau_be = T_cycle / T_decode``. Definitions and a worked example are
in ``docs/statistics.md``, "Speculative decoding". Pure; times in any one unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CycleEstimate", "break_even_accept_length", "estimate_cycle_time", "speedup"]


def _positive(name: str, value: float) -> float:
    if not (value > 0.0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def _cycle(t_cycle: float, t_draft: float) -> float:
    _positive("t_cycle", t_cycle)
    if not (t_draft >= 0.0 and math.isfinite(t_draft)):
        raise ValueError(f"t_draft must be a finite non-negative number, got {t_draft!r}")
    return t_cycle + t_draft


def _accept_length(value: float) -> float:
    if not (value >= 1.0 and math.isfinite(value)):
        raise ValueError(
            "accept_length counts the target model's own token, so it is at least 1 "
            f"(tokens per verify per request), got {value!r}"
        )
    return float(value)


def break_even_accept_length(t_cycle: float, t_decode: float, *, t_draft: float = 0.0) -> float:
    """Return the acceptance length at which speculation exactly pays for itself.

    ``tau_be = (t_cycle + t_draft) / t_decode``: a cycle commits ``tau`` tokens in the time
    of ``tau_be`` plain decode steps. ``break_even_accept_length(0.030, 0.012)`` is 2.5.

    :param t_cycle: duration of one speculative cycle (draft + verify + overhead), or of the
        verify forward alone if the draft time is given separately as *t_draft*.
    :param t_decode: duration of one plain decode step at the same batch size.
    :param t_draft: drafting time per cycle not already included in *t_cycle*.
    :returns: the break-even acceptance length (tokens per cycle per request, bonus included).
    :raises ValueError: on non-positive or non-finite times (or a negative *t_draft*).
    """
    cycle = _cycle(t_cycle, t_draft)
    return cycle / _positive("t_decode", t_decode)


def speedup(
    accept_length: float, t_cycle: float, t_decode: float, *, t_draft: float = 0.0
) -> float:
    """Return the decode speed-up of speculation over plain decoding.

    ``S = tau * t_decode / (t_cycle + t_draft)``, the ratio of output tokens per second per
    request; above 1 speculation pays off. Equivalent to ``tau / tau_be``.

    :param accept_length: tokens committed per cycle per request, bonus token included.
    :param t_cycle: duration of one speculative cycle (or of the verify, see *t_draft*).
    :param t_decode: duration of one plain decode step at the same batch size.
    :param t_draft: drafting time per cycle not already included in *t_cycle*.
    :raises ValueError: on an acceptance length below 1 or bad times.
    """
    tau = _accept_length(accept_length)
    cycle = _cycle(t_cycle, t_draft)
    return tau * _positive("t_decode", t_decode) / cycle


@dataclass(frozen=True)
class CycleEstimate:
    """What a speculative and a plain measurement at one concurrency imply about the cycle."""

    #: Implied speculative cycle time, ``accept_length * spec_tpot``.
    t_cycle: float
    #: Plain decode step time, taken as the plain run's per-token latency.
    t_decode: float
    #: The measured acceptance length.
    accept_length: float
    #: ``t_cycle / t_decode``: the acceptance length needed to break even.
    break_even: float
    #: ``t_decode / spec_tpot``: the measured speed-up (above 1: speculation pays off).
    speedup: float

    def as_dict(self) -> dict[str, float]:
        """Return the estimate as plain JSON types (every field by name)."""
        return {
            "t_cycle": self.t_cycle,
            "t_decode": self.t_decode,
            "accept_length": self.accept_length,
            "break_even": self.break_even,
            "speedup": self.speedup,
        }


def estimate_cycle_time(
    *, spec_tpot: float, base_tpot: float, accept_length: float
) -> CycleEstimate:
    """Infer the speculative cycle time and break-even from two measurements.

    ``T_cycle = tau * TPOT_spec``, ``tau_be = T_cycle / TPOT_base`` and
    ``S = TPOT_base / TPOT_spec`` (``docs/statistics.md``): no server instrumentation needed.
    Measure both at the same concurrency and workload.

    :param spec_tpot: per-token latency (TPOT) of the speculative configuration.
    :param base_tpot: per-token latency of the plain configuration at the same concurrency.
    :param accept_length: the speculative run's acceptance length,
        ``sum(completion_tokens) / sum(spec_verify_ct)`` over its requests.
    :raises ValueError: on non-positive latencies or an acceptance length below 1.
    """
    spec = _positive("spec_tpot", spec_tpot)
    base = _positive("base_tpot", base_tpot)
    tau = _accept_length(accept_length)
    t_cycle = tau * spec
    return CycleEstimate(
        t_cycle=t_cycle,
        t_decode=base,
        accept_length=tau,
        break_even=t_cycle / base,
        speedup=base / spec,
    )
