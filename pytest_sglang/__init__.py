"""pytest-sglang: acceptance and performance tests of SGLang inference servers.

The public API is loaded lazily so that importing the plugin (which pytest does in every
run of an environment that has it installed) stays cheap. One table, :data:`_EXPORTS`, names
every public name and the module it lives in: it drives ``__all__`` and the lazy loading;
the ``TYPE_CHECKING`` imports below repeat it for type checkers only, and a test keeps the two
identical (``tests/architecture/test_public_api.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # ``X as X``: an explicit re-export, for type checkers; the names load lazily at runtime.
    from pytest_sglang.config.profiles import (
        Profile as Profile,
    )
    from pytest_sglang.config.settings import (
        Settings as Settings,
    )
    from pytest_sglang.config.targets import (
        ServerTarget as ServerTarget,
    )
    from pytest_sglang.errors import (
        ComparisonRefused as ComparisonRefused,
    )
    from pytest_sglang.errors import (
        GpuMemoryNotReleased as GpuMemoryNotReleased,
    )
    from pytest_sglang.errors import (
        GpuNotClean as GpuNotClean,
    )
    from pytest_sglang.errors import (
        GpuUnavailable as GpuUnavailable,
    )
    from pytest_sglang.errors import (
        IdentityMismatch as IdentityMismatch,
    )
    from pytest_sglang.errors import (
        Inconclusive as Inconclusive,
    )
    from pytest_sglang.errors import (
        MeasurementFailed as MeasurementFailed,
    )
    from pytest_sglang.errors import (
        PerformanceAssertionError as PerformanceAssertionError,
    )
    from pytest_sglang.errors import (
        SchemaMismatch as SchemaMismatch,
    )
    from pytest_sglang.errors import (
        ServerDied as ServerDied,
    )
    from pytest_sglang.errors import (
        ServerExited as ServerExited,
    )
    from pytest_sglang.errors import (
        ServerLeftovers as ServerLeftovers,
    )
    from pytest_sglang.errors import (
        ServerNotReady as ServerNotReady,
    )
    from pytest_sglang.errors import (
        ServerUnavailable as ServerUnavailable,
    )
    from pytest_sglang.errors import (
        SGLangError as SGLangError,
    )
    from pytest_sglang.errors import (
        SGLangWarning as SGLangWarning,
    )
    from pytest_sglang.gpu.model import (
        GpuSnapshot as GpuSnapshot,
    )
    from pytest_sglang.gpu.state import (
        GpuState as GpuState,
    )
    from pytest_sglang.loadgen.runner import (
        LoadGenerator as LoadGenerator,
    )
    from pytest_sglang.loadgen.workload import (
        Workload as Workload,
    )
    from pytest_sglang.measure.bench import (
        Bench as Bench,
    )
    from pytest_sglang.measure.measurement import (
        Measurement as Measurement,
    )
    from pytest_sglang.measure.results import (
        BenchResult as BenchResult,
    )
    from pytest_sglang.measure.results import (
        Sweep as Sweep,
    )
    from pytest_sglang.measure.session_format import (
        StoredMeasurement as StoredMeasurement,
    )
    from pytest_sglang.measure.slo import (
        Slo as Slo,
    )
    from pytest_sglang.measure.store import (
        BaselineStore as BaselineStore,
    )
    from pytest_sglang.server.handle import (
        ModelCard as ModelCard,
    )
    from pytest_sglang.server.handle import (
        ReadinessTimings as ReadinessTimings,
    )
    from pytest_sglang.server.handle import (
        SGLangServer as SGLangServer,
    )
    from pytest_sglang.server.pool import (
        ServerPool as ServerPool,
    )
    from pytest_sglang.verdicts.adaptive import (
        assert_adaptive as assert_adaptive,
    )
    from pytest_sglang.verdicts.assertions import (
        CrossoverVerdict as CrossoverVerdict,
    )
    from pytest_sglang.verdicts.assertions import (
        Verdict as Verdict,
    )
    from pytest_sglang.verdicts.assertions import (
        assert_at_least as assert_at_least,
    )
    from pytest_sglang.verdicts.assertions import (
        assert_at_most as assert_at_most,
    )
    from pytest_sglang.verdicts.assertions import (
        assert_faster as assert_faster,
    )
    from pytest_sglang.verdicts.assertions import (
        estimate_break_even as estimate_break_even,
    )
    from pytest_sglang.verdicts.assertions import (
        find_crossover as find_crossover,
    )
    from pytest_sglang.verdicts.capacity import (
        CapacityVerdict as CapacityVerdict,
    )
    from pytest_sglang.verdicts.capacity import (
        find_capacity as find_capacity,
    )
    from pytest_sglang.verdicts.greedy import (
        assert_greedy_equivalent as assert_greedy_equivalent,
    )
    from pytest_sglang.verdicts.regression import (
        assert_no_regression as assert_no_regression,
    )
    from pytest_sglang.verdicts.slo import (
        assert_slo as assert_slo,
    )
    from pytest_sglang.verdicts.specdecode import (
        break_even_accept_length as break_even_accept_length,
    )

#: Every public name and the module that defines it.
_EXPORTS: dict[str, str] = {
    "ComparisonRefused": "pytest_sglang.errors",
    "GpuMemoryNotReleased": "pytest_sglang.errors",
    "GpuNotClean": "pytest_sglang.errors",
    "GpuUnavailable": "pytest_sglang.errors",
    "IdentityMismatch": "pytest_sglang.errors",
    "Inconclusive": "pytest_sglang.errors",
    "MeasurementFailed": "pytest_sglang.errors",
    "PerformanceAssertionError": "pytest_sglang.errors",
    "SchemaMismatch": "pytest_sglang.errors",
    "ServerDied": "pytest_sglang.errors",
    "ServerExited": "pytest_sglang.errors",
    "ServerLeftovers": "pytest_sglang.errors",
    "ServerNotReady": "pytest_sglang.errors",
    "ServerUnavailable": "pytest_sglang.errors",
    "SGLangError": "pytest_sglang.errors",
    "SGLangWarning": "pytest_sglang.errors",
    "Settings": "pytest_sglang.config.settings",
    "Profile": "pytest_sglang.config.profiles",
    "ServerTarget": "pytest_sglang.config.targets",
    "GpuSnapshot": "pytest_sglang.gpu.model",
    "GpuState": "pytest_sglang.gpu.state",
    "ModelCard": "pytest_sglang.server.handle",
    "ReadinessTimings": "pytest_sglang.server.handle",
    "SGLangServer": "pytest_sglang.server.handle",
    "ServerPool": "pytest_sglang.server.pool",
    "Workload": "pytest_sglang.loadgen.workload",
    "LoadGenerator": "pytest_sglang.loadgen.runner",
    "Measurement": "pytest_sglang.measure.measurement",
    "Bench": "pytest_sglang.measure.bench",
    "BenchResult": "pytest_sglang.measure.results",
    "Sweep": "pytest_sglang.measure.results",
    "CrossoverVerdict": "pytest_sglang.verdicts.assertions",
    "Verdict": "pytest_sglang.verdicts.assertions",
    "assert_at_least": "pytest_sglang.verdicts.assertions",
    "assert_at_most": "pytest_sglang.verdicts.assertions",
    "assert_faster": "pytest_sglang.verdicts.assertions",
    "estimate_break_even": "pytest_sglang.verdicts.assertions",
    "find_crossover": "pytest_sglang.verdicts.assertions",
    "break_even_accept_length": "pytest_sglang.verdicts.specdecode",
    "assert_greedy_equivalent": "pytest_sglang.verdicts.greedy",
    "assert_adaptive": "pytest_sglang.verdicts.adaptive",
    "Slo": "pytest_sglang.measure.slo",
    "assert_slo": "pytest_sglang.verdicts.slo",
    "CapacityVerdict": "pytest_sglang.verdicts.capacity",
    "find_capacity": "pytest_sglang.verdicts.capacity",
    "BaselineStore": "pytest_sglang.measure.store",
    "StoredMeasurement": "pytest_sglang.measure.session_format",
    "assert_no_regression": "pytest_sglang.verdicts.regression",
}

__version__: str  # read from the installed metadata on first use (that costs milliseconds)

# Built from the table, which ruff cannot read (PLE0605); a test keeps it honest.
__all__ = sorted([*_EXPORTS, "__version__"])  # noqa: PLE0605


def __getattr__(name: str) -> Any:
    """Import public names on first use."""
    if name == "__version__":
        from pytest_sglang._version import plugin_version

        return plugin_version()
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_sglang' has no attribute {name!r}")
    # Not cached in globals(): resolved through sys.modules every time, so that code which
    # swaps modules out (pytester restores sys.modules after each in-process run) never
    # gets a function bound to a discarded module, recording into a discarded context.
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
