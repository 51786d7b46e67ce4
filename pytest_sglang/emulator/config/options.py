"""The emulator's launch configuration, as the CLI resolves it (frozen)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sglang.emulator.config.faults import Faults
from pytest_sglang.emulator.config.model import ModelProfile
from pytest_sglang.emulator.config.perf_options import PerfOptions
from pytest_sglang.emulator.config.server_args import NEW_VERSION


@dataclass(frozen=True)
class EmulatorOptions:
    """The ``--emulator-*`` options: version surface, timings, speculation and faults."""

    version: str = NEW_VERSION
    load_time: float = 2.0
    warmup_time: float = 1.0
    health_probe_time: float = 1.0
    decode_ms: float = 10.0
    prefill_ms: float = 10.0
    #: ``--emulator-model-context-length``; ``None``: the model's ``config.json``, else 131072.
    model_context_length: int | None = None
    accept_length: float = 2.0
    architecture: str | None = None
    gpu_dir: Path | None = None
    faults: Faults = field(default_factory=Faults)
    perf: PerfOptions = field(default_factory=PerfOptions)

    @property
    def is_new(self) -> bool:
        """Whether the 0.5.23 surface is emulated (``/server_info``, ``/ready``...)."""
        return self.version == NEW_VERSION


@dataclass(frozen=True)
class LaunchConfig:
    """Everything the emulator needs to run: resolved server args, options, model."""

    server_args: Mapping[str, Any]
    options: EmulatorOptions
    model: ModelProfile
    launch_command: str
    warnings: tuple[str, ...] = ()

    @property
    def served_model_name(self) -> str:
        """The model id clients see (``--served-model-name`` or the model path)."""
        return str(self.server_args["served_model_name"])

    @property
    def context_length(self) -> int:
        """The effective context length: ``--context-length``, else the model's.

        ``/server_info`` shows ``context_length`` as given (``null`` when it was not); this
        is the value SGLang's model config resolves, which ``/v1/models`` reports as
        ``max_model_len``.
        """
        given = self.server_args["context_length"]
        return int(given) if given is not None else self.model.context_length

    @property
    def speculative_algorithm(self) -> str | None:
        """The resolved, upper-cased speculative algorithm, or ``None``."""
        value = self.server_args["speculative_algorithm"]
        return None if value is None else str(value)

    @property
    def api_key(self) -> str | None:
        """The API key clients must send, or ``None``."""
        value = self.server_args["api_key"]
        return None if value is None else str(value)
