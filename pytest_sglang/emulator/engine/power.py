"""A toy power model of the emulated GPUs, so fake telemetry has a ground truth.

Each GPU draws ``IDLE_W`` between forwards and, during a forward, from ``BASE_W`` up to
``MAX_W`` as the tokens the forward processes approach ``SATURATION_TOKENS`` (an H200-like
shape, not a measurement). Energy is accrued in *model* time: at ``--emulator-speedup S``
a forward lasts ``1/S`` of its model time, and the counter advances as the modelled GPU's
would, so energy per token does not depend on the speed-up. :class:`PowerMeter` keeps the
counter and a log of ``(time.monotonic(), total joules)`` at every change of power, which the
trace's summary carries as the ground truth for a client's energy figures.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["BASE_W", "IDLE_W", "MAX_W", "SATURATION_TOKENS", "PowerMeter", "forward_power"]

IDLE_W = 100.0
BASE_W = 250.0
MAX_W = 700.0
SATURATION_TOKENS = 256


def forward_power(tokens: int) -> float:
    """Watts one GPU draws during a forward over ``tokens`` tokens."""
    return BASE_W + (MAX_W - BASE_W) * min(1.0, max(0, tokens) / SATURATION_TOKENS)


class PowerMeter:
    """Per-GPU power and cumulative energy of ``gpus`` identical GPUs (see the module doc)."""

    def __init__(
        self, gpus: int, speedup: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.gpus = max(1, gpus)
        self.speedup = speedup
        self._clock = clock
        self._since = clock()
        self._energy = 0.0  # joules, per GPU
        self.power = IDLE_W
        self.busy = False
        #: ``(monotonic time, joules over all GPUs)`` at every change of power.
        self.log: list[tuple[float, float]] = [(self._since, 0.0)]
        #: Called when the GPUs fall idle, so a telemetry writer publishes the change at once
        #: (a reader extrapolating at the busy rate would overcount).
        self.on_idle: Callable[[], None] | None = None

    def _accrue(self, now: float) -> None:
        self._energy += self.power * (now - self._since) * self.speedup
        self._since = now

    def forward(self, tokens: int) -> None:
        """Draw a forward's power from now on: ``tokens`` tokens in it."""
        self._set(forward_power(tokens), busy=True)

    def idle(self) -> None:
        """Draw idle power from now on (no forward runs)."""
        if self.busy:
            self._set(IDLE_W, busy=False)
            if self.on_idle is not None:
                self.on_idle()

    def _set(self, power: float, *, busy: bool) -> None:
        now = self._clock()
        self._accrue(now)
        self.power, self.busy = power, busy
        self.log.append((now, self._energy * self.gpus))

    def energy(self) -> float:
        """Joules one GPU has used since the meter started (model time)."""
        self._accrue(self._clock())
        return self._energy

    def rate(self) -> float:
        """Joules per real second one GPU accrues now (power times the speed-up)."""
        return self.power * self.speedup
