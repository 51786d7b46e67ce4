"""pytest-sglang: acceptance and performance tests of SGLang inference servers.

The public names are ``_EXPORTS``; each is imported from its module on first use, so that
importing the plugin (pytest does, in every run of an environment that has it) stays cheap.
The ``TYPE_CHECKING`` imports repeat them for type checkers (a test keeps the two equal).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_sglang.config.settings import Settings as Settings
    from pytest_sglang.errors import Inconclusive as Inconclusive
    from pytest_sglang.errors import MeasurementFailed as MeasurementFailed
    from pytest_sglang.errors import PerformanceAssertionError as PerformanceAssertionError
    from pytest_sglang.errors import ServerNotReady as ServerNotReady
    from pytest_sglang.errors import SGLangError as SGLangError
    from pytest_sglang.gpu.probes import GpuState as GpuState
    from pytest_sglang.loadgen.workload import Workload as Workload
    from pytest_sglang.measure.bench import Bench as Bench
    from pytest_sglang.measure.results import BenchResult as BenchResult
    from pytest_sglang.measure.results import Sweep as Sweep
    from pytest_sglang.measure.slo import Slo as Slo
    from pytest_sglang.server.handle import SGLangServer as SGLangServer
    from pytest_sglang.verdicts.assertions import assert_adaptive as assert_adaptive
    from pytest_sglang.verdicts.assertions import assert_at_least as assert_at_least
    from pytest_sglang.verdicts.assertions import assert_at_most as assert_at_most
    from pytest_sglang.verdicts.assertions import assert_faster as assert_faster
    from pytest_sglang.verdicts.assertions import estimate_break_even as estimate_break_even
    from pytest_sglang.verdicts.assertions import find_crossover as find_crossover
    from pytest_sglang.verdicts.greedy import assert_greedy_equivalent as assert_greedy_equivalent
    from pytest_sglang.verdicts.regression import assert_no_regression as assert_no_regression
    from pytest_sglang.verdicts.slo import assert_slo as assert_slo
    from pytest_sglang.verdicts.slo import find_capacity as find_capacity

#: Every public name (``__version__`` aside) and the module that defines it.
_EXPORTS = {
    "Bench": "pytest_sglang.measure.bench",
    "BenchResult": "pytest_sglang.measure.results",
    "GpuState": "pytest_sglang.gpu.probes",
    "Inconclusive": "pytest_sglang.errors",
    "MeasurementFailed": "pytest_sglang.errors",
    "PerformanceAssertionError": "pytest_sglang.errors",
    "SGLangError": "pytest_sglang.errors",
    "SGLangServer": "pytest_sglang.server.handle",
    "ServerNotReady": "pytest_sglang.errors",
    "Settings": "pytest_sglang.config.settings",
    "Slo": "pytest_sglang.measure.slo",
    "Sweep": "pytest_sglang.measure.results",
    "Workload": "pytest_sglang.loadgen.workload",
    "assert_adaptive": "pytest_sglang.verdicts.assertions",
    "assert_at_least": "pytest_sglang.verdicts.assertions",
    "assert_at_most": "pytest_sglang.verdicts.assertions",
    "assert_faster": "pytest_sglang.verdicts.assertions",
    "assert_greedy_equivalent": "pytest_sglang.verdicts.greedy",
    "assert_no_regression": "pytest_sglang.verdicts.regression",
    "assert_slo": "pytest_sglang.verdicts.slo",
    "estimate_break_even": "pytest_sglang.verdicts.assertions",
    "find_capacity": "pytest_sglang.verdicts.slo",
    "find_crossover": "pytest_sglang.verdicts.assertions",
}

__version__: str  # read from the installed metadata on first use (that costs milliseconds)


def __getattr__(name: str) -> Any:
    """Import public names on first use; ``__all__`` is every one of them."""
    if name == "__all__":
        return __dir__()
    if name == "__version__":
        from pytest_sglang._version import plugin_version

        return plugin_version()
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pytest_sglang' has no attribute {name!r}")
    # Not cached in globals(): code that swaps modules out (pytester restores sys.modules
    # after each in-process run) must never get a name bound to a discarded module.
    return getattr(importlib.import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted([*_EXPORTS, "__version__"])
