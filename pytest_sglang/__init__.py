"""pytest-sglang: acceptance and performance tests of SGLang inference servers.

The public names are the ``TYPE_CHECKING`` imports below, listed once: type checkers read
them as re-exports, and ``__getattr__`` reads them from this file to import each name from
its module on first use, so that importing the plugin (which pytest does in every run of an
environment that has it installed) stays cheap. Everything else is importable from its module.
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # ``X as X``: an explicit re-export, for type checkers; the names load lazily at runtime.
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
    from pytest_sglang.verdicts.adaptive import assert_adaptive as assert_adaptive
    from pytest_sglang.verdicts.assertions import assert_at_least as assert_at_least
    from pytest_sglang.verdicts.assertions import assert_at_most as assert_at_most
    from pytest_sglang.verdicts.assertions import assert_faster as assert_faster
    from pytest_sglang.verdicts.assertions import estimate_break_even as estimate_break_even
    from pytest_sglang.verdicts.assertions import find_crossover as find_crossover
    from pytest_sglang.verdicts.capacity import find_capacity as find_capacity
    from pytest_sglang.verdicts.greedy import assert_greedy_equivalent as assert_greedy_equivalent
    from pytest_sglang.verdicts.regression import assert_no_regression as assert_no_regression
    from pytest_sglang.verdicts.slo import assert_slo as assert_slo

__version__: str  # read from the installed metadata on first use (that costs milliseconds)


@functools.cache
def _exports() -> dict[str, str]:
    """Every public name and the module that defines it: the ``TYPE_CHECKING`` imports."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    return {
        alias.name: str(node.module)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


def __getattr__(name: str) -> Any:
    """Import public names on first use; ``__all__`` is every one of them."""
    if name == "__all__":
        return sorted([*_exports(), "__version__"])
    if name == "__version__":
        from pytest_sglang._version import plugin_version

        return plugin_version()
    module = _exports().get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_sglang' has no attribute {name!r}")
    # Not cached in globals(): resolved through sys.modules every time, so that code which
    # swaps modules out (pytester restores sys.modules after each in-process run) never
    # gets a function bound to a discarded module, recording into a discarded context.
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*_exports(), "__version__"])
