"""pytest-sglang: acceptance and performance tests of SGLang inference servers.

The public API is loaded lazily so that importing the plugin (which pytest does in every
run of an environment that has it installed) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sglang.bench import (
        BenchResult,
        Sweep,
    )
    from pytest_sglang.errors import (
        ComparisonRefused,
        GpuMemoryNotReleased,
        GpuNotClean,
        GpuUnavailable,
        IdentityMismatch,
        Inconclusive,
        PerformanceAssertionError,
        SchemaMismatch,
        ServerExited,
        ServerLeftovers,
        ServerNotReady,
        ServerUnavailable,
        SGLangError,
    )
    from pytest_sglang.gpu.model import (
        GpuSnapshot,
    )
    from pytest_sglang.loadgen.runner import (
        LoadGenerator,
    )
    from pytest_sglang.measurement import (
        Measurement,
    )
    from pytest_sglang.server.handle import (
        ModelCard,
        ReadinessTimings,
        SGLangServer,
    )
    from pytest_sglang.specdecode import (
        break_even_accept_length,
    )
    from pytest_sglang.verdicts import (
        CrossoverVerdict,
        Verdict,
        assert_at_least,
        assert_at_most,
        assert_faster,
        estimate_break_even,
        find_crossover,
    )
    from pytest_sglang.workload import (
        Workload,
    )

__version__: str  # read from the installed metadata on first use (that costs milliseconds)

__all__ = [
    "BenchResult",
    "ComparisonRefused",
    "CrossoverVerdict",
    "GpuMemoryNotReleased",
    "GpuNotClean",
    "GpuSnapshot",
    "GpuUnavailable",
    "IdentityMismatch",
    "Inconclusive",
    "LoadGenerator",
    "Measurement",
    "ModelCard",
    "PerformanceAssertionError",
    "ReadinessTimings",
    "SGLangError",
    "SGLangServer",
    "SchemaMismatch",
    "ServerExited",
    "ServerLeftovers",
    "ServerNotReady",
    "ServerUnavailable",
    "Sweep",
    "Verdict",
    "Workload",
    "__version__",
    "assert_at_least",
    "assert_at_most",
    "assert_faster",
    "break_even_accept_length",
    "estimate_break_even",
    "find_crossover",
]

_LAZY = {
    "IdentityMismatch": "pytest_sglang.errors",
    "SGLangError": "pytest_sglang.errors",
    "SchemaMismatch": "pytest_sglang.errors",
    "ServerNotReady": "pytest_sglang.errors",
    "ServerUnavailable": "pytest_sglang.errors",
    "ServerExited": "pytest_sglang.errors",
    "GpuNotClean": "pytest_sglang.errors",
    "GpuMemoryNotReleased": "pytest_sglang.errors",
    "GpuUnavailable": "pytest_sglang.errors",
    "ServerLeftovers": "pytest_sglang.errors",
    "ComparisonRefused": "pytest_sglang.errors",
    "Inconclusive": "pytest_sglang.errors",
    "PerformanceAssertionError": "pytest_sglang.errors",
    "ModelCard": "pytest_sglang.server.handle",
    "ReadinessTimings": "pytest_sglang.server.handle",
    "SGLangServer": "pytest_sglang.server.handle",
    "Workload": "pytest_sglang.workload",
    "Measurement": "pytest_sglang.measurement",
    "BenchResult": "pytest_sglang.bench",
    "Sweep": "pytest_sglang.bench",
    "LoadGenerator": "pytest_sglang.loadgen.runner",
    "Verdict": "pytest_sglang.verdicts",
    "CrossoverVerdict": "pytest_sglang.verdicts",
    "assert_faster": "pytest_sglang.verdicts",
    "assert_at_least": "pytest_sglang.verdicts",
    "assert_at_most": "pytest_sglang.verdicts",
    "find_crossover": "pytest_sglang.verdicts",
    "estimate_break_even": "pytest_sglang.verdicts",
    "break_even_accept_length": "pytest_sglang.specdecode",
    "GpuSnapshot": "pytest_sglang.gpu.model",
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pytest-sglang")
    except PackageNotFoundError:  # running from a source tree without installation
        return "0+unknown"


def __getattr__(name: str) -> Any:
    """Import public names on first use."""
    if name == "__version__":
        globals()["__version__"] = _version()
        return globals()["__version__"]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_sglang' has no attribute {name!r}")
    # Not cached in globals(): resolved through sys.modules every time, so that code which
    # swaps modules out (pytester restores sys.modules after each in-process run) never
    # gets a function bound to a discarded module, recording into a discarded context.
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
