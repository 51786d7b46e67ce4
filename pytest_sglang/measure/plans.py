"""Measurements declared at collection (``sglang_measure``), per launched server.

They are taken while that server is up, so each profile launches once per session
(:meth:`~pytest_sglang.measure.bench.Bench.take_declared`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_sglang.loadgen.schedule import ClosedLoop, Load
    from pytest_sglang.loadgen.workload import Workload

__all__ = [
    "DEFAULT_REPEATS",
    "PLANS_KEY",
    "CacheKey",
    "Declared",
    "MeasurementPlans",
    "cache_key",
    "declared_measurements",
]

#: Runs per measurement when a test does not say (``sglang_bench`` and ``sglang_measure``).
DEFAULT_REPEATS = 5

_EXAMPLE = (
    "write e.g. @pytest.mark.sglang_measure('baseline', 'eagle3', workload=CHAT, "
    "concurrency=[1, 64], repeats=5)"
)


@dataclass(frozen=True)
class Declared:
    """One measurement a test declared: a server, a workload, a level and its repeats."""

    server: str
    workload: Workload
    concurrency: int
    repeats: int

    def label(self) -> str:
        """Return e.g. ``baseline @ C=64 (x5)``."""
        return f"{self.server} @ C={self.concurrency} (x{self.repeats})"

    @property
    def load(self) -> ClosedLoop:
        """The closed loop it measures."""
        from pytest_sglang.loadgen.schedule import ClosedLoop  # marked tests only

        return ClosedLoop(self.concurrency)


#: The session cache's key of a measurement: server, workload, load, repeats.
CacheKey = tuple[str, str, str, int]
#: Every measurement the selected tests declared, by cache key, in declaration order.
MeasurementPlans = dict[CacheKey, Declared]

#: The measurements the selected tests declare (``sglang_measure``), set at collection.
PLANS_KEY = pytest.StashKey[MeasurementPlans]()


def cache_key(server: str, workload: Workload, load: Load, repeats: int) -> CacheKey:
    """Return the session cache's key of a measurement."""
    return (server, workload.key(), load.key(), repeats)


def _declared(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[Declared]:
    """Return the measurements one ``sglang_measure`` marker declares (ValueError: why not)."""
    from pytest_sglang.loadgen.workload import Workload  # not with the plugin: marked tests only
    from pytest_sglang.measure.budget import check_fills, levels_of, repeats_of

    unknown = sorted(set(kwargs) - {"workload", "concurrency", "repeats"})
    if unknown:
        raise ValueError(f"unknown keyword(s) {', '.join(unknown)}; {_EXAMPLE}")
    if not args or not all(isinstance(s, str) and s for s in args):
        raise ValueError(f"name one or more servers first, got {args!r}; {_EXAMPLE}")
    workload = kwargs.get("workload")
    if not isinstance(workload, Workload):
        raise ValueError(
            f"workload= must be a pytest_sglang.Workload, got {type(workload).__name__}; {_EXAMPLE}"
        )
    levels = sorted(levels_of(kwargs.get("concurrency", 1)))
    repeats = repeats_of(kwargs.get("repeats", DEFAULT_REPEATS))
    for level in levels:
        check_fills(workload, level)
    return [Declared(server, workload, level, repeats) for server in args for level in levels]


def declared_measurements(items: Iterable[pytest.Item]) -> MeasurementPlans:
    """Return what the ``sglang_measure`` markers of ``items`` declare, in their order.

    :raises pytest.UsageError: a malformed marker, naming the test and the fix.
    """
    plans: MeasurementPlans = {}
    for item in items:
        for marker in item.iter_markers("sglang_measure"):
            try:
                declared = _declared(marker.args, marker.kwargs)
            except (TypeError, ValueError) as exc:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_measure: {exc}"
                ) from None
            for one in declared:
                key = cache_key(one.server, one.workload, one.load, one.repeats)
                plans.setdefault(key, one)
    return plans
