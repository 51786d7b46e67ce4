"""Adaptive speculation (0.5.23's ``--speculative-adaptive``): the step count per batch size.

Modelled on SGLang's ``srt/speculative/adaptive_spec_params.py``. The config is a JSON object
whose integer-string keys are batch sizes (*buckets*), each with ``candidate_steps`` (0 means
no drafting) and knobs; other top-level keys are knobs for every bucket. A batch is padded to
the next captured CUDA-graph size, then served by the largest bucket not above it (else the
smallest). Each bucket keeps an EMA (``ema_alpha``) of the accepted drafts per request; after
``warmup_batches`` verifies it re-decides every ``update_interval``: down to a lower candidate
``s`` while the EMA <= ``s - 0.5 + down_hysteresis`` (``0.5 + ...`` when ``s`` is 0), else up
while the EMA > ``current - 0.5 + up_hysteresis``; from 0 it probes the next candidate.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_CONFIG", "AdaptiveSteps", "StepSlot", "candidate_union", "load_config"]

_KNOBS = {"up_hysteresis": 0.0, "down_hysteresis": 0.0, "ceiling_coeff": 0}
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], **_KNOBS, "down_hysteresis": -0.25},
    "8": {"candidate_steps": [0, 1, 3], **_KNOBS},
    "32": {"candidate_steps": [0, 1], **_KNOBS},
    "64": {"candidate_steps": [0], **_KNOBS},
}


def load_config(path: str | None) -> dict[int, dict[str, Any]]:
    """Read and check ``--speculative-adaptive-config`` as SGLang does; buckets by batch size.

    :raises ValueError: SGLang's error, its exception type first (the file is missing or not
        JSON, a bucket's ``candidate_steps`` is not a non-empty list of ints >= 0, no bucket).
    """
    cfg: Any = DEFAULT_CONFIG
    if path is not None:
        try:
            with open(path) as file:
                cfg = json.load(file)
        except OSError as exc:
            raise ValueError(f"{type(exc).__name__}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"json.decoder.JSONDecodeError: {exc}") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"AttributeError: '{type(cfg).__name__}' object has no attribute 'items'")
    buckets: dict[int, dict[str, Any]] = {}
    for key, entry in cfg.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, dict):
            raise ValueError(
                f"AttributeError: '{type(entry).__name__}' object has no attribute 'get'"
            )
        steps = entry.get("candidate_steps")
        if not (isinstance(steps, list) and steps and all(_step(s) for s in steps)):
            raise ValueError(
                f"ValueError: BS {key}: candidate_steps must be a list of non-negative ints, "
                f"got {steps!r}"
            )
        buckets[int(key)] = {**cfg, **entry}
    if not buckets:
        raise ValueError(
            "ValueError: speculative_adaptive_config must contain at least one integer-string "
            'BS key, e.g. {"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(cfg.keys())}"
        )
    return buckets


def _step(value: object) -> bool:
    return isinstance(value, int) and value >= 0


def candidate_union(buckets: Mapping[int, Mapping[str, Any]]) -> list[int]:
    """Every bucket's candidate steps, sorted (SGLang sizes its buffers by these)."""
    return sorted({int(s) for entry in buckets.values() for s in entry["candidate_steps"]})


class StepSlot:
    """One bucket: its candidates, the EMA of accepted drafts and the current step count."""

    def __init__(self, initial_steps: int, cfg: Mapping[str, Any]) -> None:
        self.candidates = sorted({int(s) for s in cfg["candidate_steps"]})
        self.alpha = float(cfg.get("ema_alpha", 0.2))
        self.interval = int(cfg.get("update_interval", 5))
        self.warmup = int(cfg.get("warmup_batches", 10))
        self.down = float(cfg.get("down_hysteresis", -0.25))
        self.up = float(cfg.get("up_hysteresis", 0.0))
        self.ceiling = float(cfg.get("ceiling_coeff", 0))
        middle = self.candidates[len(self.candidates) // 2]
        self.steps = initial_steps if initial_steps in self.candidates else middle
        self.ema = float(self.steps - 1)
        self.batches = 0

    def update(self, accepted_drafts: Sequence[int]) -> bool:
        """Feed one verify's accepted drafts per request; return whether the steps changed."""
        if not accepted_drafts:
            return False
        if self.steps > 0:
            mean = sum(accepted_drafts) / len(accepted_drafts)
            self.ema = (1 - self.alpha) * self.ema + self.alpha * mean
        self.batches += 1
        if self.batches <= self.warmup or (self.batches - self.warmup) % self.interval:
            return False
        old = self.steps
        index = self.candidates.index(old)
        last = len(self.candidates) - 1
        if old == 0:
            target = self.candidates[min(index + 1, last)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            self.steps = target
            return target != old
        start = index
        while index > 0:
            lower = self.candidates[index - 1]
            if self.ema > (0.5 if lower == 0 else lower - 0.5) + self.down:
                break
            index -= 1
        if index == start:
            while index < last and self.ema > self.candidates[index] - 0.5 + self.up:
                index += 1
        target = self.candidates[index]
        if self.ceiling > 0:
            cap = max(1, math.ceil(self.ema * self.ceiling))
            if cap < target <= old:
                while index > 0 and self.candidates[index] > cap:
                    index -= 1
                target = self.candidates[index]
        self.steps = target
        return target != old


class AdaptiveSteps:
    """Routes a batch to its bucket's :class:`StepSlot` (``graph_sizes``: CUDA-graph batches).

    ``on_change(old, new, ema)`` is called when a bucket re-decides its steps (SGLang logs it).
    ``zero_step_extend``: at 0 steps the draft model still extends over the batch (SGLang's
    default; ``SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1`` skips it).
    """

    def __init__(
        self,
        initial_steps: int,
        buckets: Mapping[int, Mapping[str, Any]],
        graph_sizes: Sequence[int] | None = None,
        on_change: Callable[[int, int, float], None] | None = None,
        zero_step_extend: bool = True,
    ) -> None:
        self._on_change = on_change
        self.zero_step_extend = zero_step_extend
        self._sizes = sorted(buckets)
        self._slots = {bs: StepSlot(initial_steps, buckets[bs]) for bs in self._sizes}
        self._graph = sorted(graph_sizes) if graph_sizes else None

    def slot(self, batch: int) -> StepSlot:
        """Return the bucket that serves a batch of ``batch`` requests."""
        if self._graph is not None:
            i = bisect.bisect_left(self._graph, batch)
            batch = self._graph[i] if i < len(self._graph) else batch
        index = bisect.bisect_right(self._sizes, batch) - 1
        return self._slots[self._sizes[max(0, index)]]

    def steps_for(self, batch: int) -> int:
        """Draft steps for the next verify of ``batch`` requests (0: no drafting)."""
        return self.slot(batch).steps

    def observe(self, accepted_drafts: Sequence[int], batch: int) -> bool:
        """Feed a verify's accepted drafts per request; return whether its bucket re-decided."""
        slot = self.slot(batch)
        old = slot.steps
        changed = slot.update(accepted_drafts)
        if changed and self._on_change is not None:
            self._on_change(old, slot.steps, slot.ema)
        return changed
