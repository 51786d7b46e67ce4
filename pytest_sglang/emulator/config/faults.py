"""The fault registry: named misbehaviours the emulator injects on request.

``--emulator-fault NAME[=VALUE]`` (repeatable) turns a fault on. The registry only knows each
fault's name, help text and how to parse its value; the behaviour lives where the fault
strikes (``loading``, ``warmup`` or ``lifecycle`` for startup faults, the routes for response
faults, the engine for generation faults), which checks ``name in ctx.faults``. To add one:

1. ``register(FaultSpec("error-rate", "...", parse_value=probability))`` below;
2. at the point where it strikes, ``if "error-rate" in faults: p = faults.value("error-rate")``;
3. a test in ``tests/emulator/test_faults.py``.

``Faults`` rejects names that were never registered, so a typo at a hook site fails loudly
instead of silently never firing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

FaultValue = int | float | str | None


@dataclass(frozen=True)
class FaultSpec:
    """One fault: its name, help text and value parser (``None``: the fault takes no value)."""

    name: str
    help: str
    parse_value: Callable[[str], FaultValue] | None = None
    default: FaultValue = None


_REGISTRY: dict[str, FaultSpec] = {}


def register(spec: FaultSpec) -> FaultSpec:
    """Add ``spec`` to the registry and return it."""
    if spec.name in _REGISTRY:
        raise ValueError(f"fault {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def registered() -> Mapping[str, FaultSpec]:
    """Every registered fault, by name."""
    return MappingProxyType(_REGISTRY)


def positive_int(text: str) -> int:
    """Parse an integer >= 1 (for values such as a token count)."""
    value = int(text)
    if value < 1:
        raise ValueError(f"expected an integer >= 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """Parse an integer >= 0 (for values such as a token position)."""
    value = int(text)
    if value < 0:
        raise ValueError(f"expected an integer >= 0, got {text!r}")
    return value


def probability(text: str) -> float:
    """Parse a probability in [0, 1] (for values such as an error rate)."""
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a probability between 0 and 1, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """Parse a float >= 0 (for values such as a delay in seconds)."""
    value = float(text)
    if value < 0.0:
        raise ValueError(f"expected a number >= 0, got {text!r}")
    return value


def parse_fault(text: str) -> tuple[str, FaultValue]:
    """Parse ``NAME[=VALUE]``; the argparse ``type`` of ``--emulator-fault``."""
    name, has_value, raw = text.partition("=")
    spec = _REGISTRY.get(name)
    if spec is None:
        valid = ", ".join(sorted(_REGISTRY))
        raise argparse.ArgumentTypeError(f"unknown fault {name!r} (valid faults: {valid})")
    if not has_value:
        return name, spec.default
    if spec.parse_value is None:
        raise argparse.ArgumentTypeError(f"fault {name!r} takes no value, got {raw!r}")
    try:
        return name, spec.parse_value(raw)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"fault {name!r}: {exc}") from None


@dataclass(frozen=True)
class Faults:
    """The faults turned on for this run, with their values."""

    active: Mapping[str, FaultValue] = field(default_factory=dict)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str) or name not in _REGISTRY:
            raise KeyError(f"no fault named {name!r} is registered")
        return name in self.active

    def value(self, name: str) -> FaultValue:
        """Return the value given to fault ``name`` (its default when given bare)."""
        if name not in self:
            raise KeyError(f"fault {name!r} is not active")
        return self.active[name]

    def describe(self) -> str:
        """``name=value`` pairs for the startup log."""
        return ", ".join(k if v is None else f"{k}={v}" for k, v in self.active.items())


def help_text() -> str:
    """One line per registered fault, for ``--help``."""
    lines = []
    for spec in _REGISTRY.values():
        value = "" if spec.parse_value is None else f"[=VALUE, default {spec.default}]"
        lines.append(f"  {spec.name}{value}: {spec.help}")
    return "\n".join(lines)


register(
    FaultSpec(
        "malformed-models",
        "GET /v1/models answers 200 with a model card that breaks the model-list shape: "
        "no `object` key and `max_model_len` as a string.",
    )
)
register(
    FaultSpec(
        "never-ready",
        "the warm-up never completes: /health, /health_generate and /ready answer 503 forever "
        "and the ready line is never logged (the other endpoints keep answering).",
    )
)
register(
    FaultSpec(
        "crash-in-warmup",
        "the port opens, then the warm-up request fails: the process logs "
        "`Initialization failed. warmup error: ...` and kills itself, as SGLang does.",
    )
)
register(
    FaultSpec(
        "context-length-mismatch",
        "the draft model's derived context length (VALUE) is below the target's: the process "
        "logs SGLang's ValueError during loading and dies before the port opens "
        "(unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, which only warns).",
        parse_value=positive_int,
        default=2048,
    )
)
register(
    FaultSpec(
        "ignore-sigterm",
        "SIGTERM is logged and ignored (a stubborn server): only SIGKILL, or SIGINT, stops it.",
    )
)
register(
    FaultSpec(
        "orphan-child",
        "while loading, start a child process in a session of its own (outside the launcher's "
        "process group, with the emulator's environment) that outlives the emulator for VALUE "
        "seconds.",
        parse_value=non_negative_float,
        default=600.0,
    )
)
register(
    FaultSpec(
        "hang",
        "after loading, the port opens and accepts connections but no request is ever "
        "answered (a zombie server); SIGTERM still stops it.",
    )
)
# Generation faults; they strike in ``fault_middleware`` (HTTP level, after the server is up).
register(
    FaultSpec(
        "error-rate",
        "that share (VALUE, 0 to 1) of generation requests (/generate, /v1/completions, "
        "/v1/chat/completions) answers HTTP 500 with SGLang's error body; which ones is "
        "seeded by --emulator-seed.",
        parse_value=probability,
        default=0.1,
    )
)
register(
    FaultSpec(
        "stall-stream",
        "every streamed generation response stops after VALUE events and never finishes: no "
        "[DONE], the connection stays open until the client gives up.",
        parse_value=positive_int,
        default=4,
    )
)
register(
    FaultSpec(
        "spec-diverge",
        "under speculative decoding, generated tokens from output position VALUE on differ "
        "from what the same server without speculation returns (a wrong verify).",
        parse_value=non_negative_int,
        default=0,
    )
)
register(
    FaultSpec(
        "crash-under-load",
        "when the VALUE-th generation request after start-up arrives, the scheduler "
        "'crashes': the process logs the error and dies by SIGKILL (exit status -9).",
        parse_value=positive_int,
        default=10,
    )
)
