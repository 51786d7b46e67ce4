"""The ``--emulator-*`` options of the performance model (``runtime.engines`` builds the engine).

Engine choice: ``--emulator-engine batch`` (continuous batching with the performance model,
``batch_engine``) or ``simple`` (a fixed delay per token, ``simple_engine``). Without the flag
the batch engine runs, unless the simple engine's own timing flags (``--emulator-decode-ms``,
``--emulator-prefill-ms``) are given: a fixed per-token delay is what such a command line asks
for, and the plugin's own tests rely on it.

``--emulator-speedup F`` divides every model time by F (the same shape, F times faster; it
applies to the simple engine's delays too). ``--emulator-noise CV`` adds run-to-run noise
(``perf_model.SpeedNoise``), seeded by ``--emulator-seed``, which also seeds the accepted
lengths and the ``error-rate`` fault. Without it the seed comes from the SGLang flags as
given (:func:`configuration_seed`): each configuration is reproducible, and two differently
configured servers, say a baseline and an EAGLE-3 profile, do not draw the same noise, which
would cancel in a comparison and make a noisy dry run look clean.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sglang.emulator.engine.perf_model import DEFAULT_PARAMS, PerfParams

__all__ = ["ENGINES", "PerfOptions", "add_options", "from_values"]

ENGINES = ("batch", "simple")

# (option suffix, PerfParams field, help text)
_PARAM_OPTIONS = (
    (
        "step-base-ms",
        "step_base_ms",
        "Fixed cost of one target-model decode or verify forward (ms).",
    ),
    (
        "step-per-token-ms",
        "step_per_token_ms",
        "Cost per token a decode or verify forward processes (ms): a decode step of B "
        "requests processes B tokens, a verify B * speculative_num_draft_tokens.",
    ),
    ("prefill-base-ms", "prefill_base_ms", "Fixed cost of one prefill (extend) forward (ms)."),
    (
        "prefill-per-token-ms",
        "prefill_per_token_ms",
        "Cost per prompt token of a prefill forward (ms).",
    ),
    (
        "draft-base-ms",
        "draft_base_ms",
        "Fixed cost of one draft-model step under speculative decoding (ms).",
    ),
    (
        "draft-per-token-ms",
        "draft_per_token_ms",
        "Cost of a draft step per running request and top-k branch (ms).",
    ),
)


@dataclass(frozen=True)
class PerfOptions:
    """Engine choice, cost constants, speed-up, noise, seed and ground-truth trace."""

    engine: str = "batch"
    params: PerfParams = field(default_factory=lambda: DEFAULT_PARAMS)
    speedup: float = 1.0
    noise: float = 0.0
    noise_interval: float = 0.5
    seed: int = 0
    trace: Path | None = None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a number >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def add_options(group: argparse._ArgumentGroup) -> None:
    """Add the performance-model options to ``group``."""
    option = group.add_argument
    option(
        "--emulator-engine",
        choices=ENGINES,
        default=None,
        help="Token generation: 'batch' (continuous batching and EAGLE speculation timed by "
        "the performance model below) or 'simple' (a fixed delay per token, "
        "--emulator-decode-ms). Default: batch, or simple when --emulator-decode-ms or "
        "--emulator-prefill-ms is given.",
    )
    option(
        "--emulator-speedup",
        type=_positive_float,
        default=1.0,
        metavar="F",
        help="Divide every model time by F: the same throughput and latency shape, F times "
        "faster (tests). Throughput figures then read F times higher. Default %(default)s.",
    )
    option(
        "--emulator-noise",
        type=_non_negative_float,
        default=0.0,
        metavar="CV",
        help="Run-to-run noise: forward costs are multiplied by a slowly varying random factor "
        "(1/f noise re-drawn every --emulator-noise-interval of model time) so that two "
        "consecutive benchmark runs differ in speed by about CV (e.g. 0.03). Default 0.",
    )
    option(
        "--emulator-noise-interval",
        type=_positive_float,
        default=0.5,
        metavar="SECONDS",
        help="Model time between re-draws of the fastest noise component. Default %(default)s.",
    )
    option(
        "--emulator-seed",
        type=_int,
        default=None,
        metavar="N",
        help="Seed of the accepted lengths, the noise and the error-rate fault. Default: "
        "derived from the SGLang flags (less --host and --port), so that each configuration "
        "is reproducible and two configurations do not share their noise.",
    )
    for suffix, name, text in _PARAM_OPTIONS:
        option(
            f"--emulator-{suffix}",
            type=_non_negative_float,
            default=getattr(DEFAULT_PARAMS, name),
            metavar="MS",
            help=f"{text} Default %(default)s (calibrated, see perf_model).",
        )
    option(
        "--emulator-trace",
        type=Path,
        default=None,
        metavar="PATH",
        help="Write ground truth as JSON lines (batch engine): per request, when it reached "
        "the engine and when each chunk was emitted (time.time() seconds), for checking a "
        "load generator's measurements.",
    )


def configuration_seed(server_flags: Mapping[str, Any]) -> int:
    """Return a seed from the SGLang flags as given, less where the server listens."""
    relevant = {k: v for k, v in server_flags.items() if k not in ("host", "port")}
    text = json.dumps(relevant, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


def from_values(
    values: Mapping[str, Any], *, simple_timing: bool = False, default_seed: int = 0
) -> PerfOptions:
    """Build the options from parsed ``values`` (argparse ``vars``).

    ``simple_timing``: the simple engine's timing flags were given (selects it by default).
    ``default_seed``: the seed without ``--emulator-seed`` (see :func:`configuration_seed`).
    """
    engine = values.get("emulator_engine")
    if engine is None:
        engine = "simple" if simple_timing else "batch"
    params = PerfParams(
        **{
            name: float(
                values.get(f"emulator_{suffix.replace('-', '_')}", getattr(DEFAULT_PARAMS, name))
            )
            for suffix, name, _ in _PARAM_OPTIONS
        }
    )
    return PerfOptions(
        engine=str(engine),
        params=params,
        speedup=float(values.get("emulator_speedup", 1.0)),
        noise=float(values.get("emulator_noise", 0.0)),
        noise_interval=float(values.get("emulator_noise_interval", 0.5)),
        seed=int(default_seed if values.get("emulator_seed") is None else values["emulator_seed"]),
        trace=values.get("emulator_trace"),
    )
