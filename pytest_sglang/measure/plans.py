"""Measurements declared at collection (``sglang_measure``), per launched server.

They are taken while that server is up, so each profile launches once per session
(:meth:`~pytest_sglang.measure.bench.Bench.take_declared`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_sglang.loadgen.workload import Workload

__all__ = [
    "DEFAULT_REPEATS",
    "MEASURE_MARKER",
    "PLANS_KEY",
    "Declared",
    "MeasurementPlans",
    "declared_by_marker",
    "declared_measurements",
]

#: Runs per measurement when a test does not say (``sglang_bench`` and ``sglang_measure``).
DEFAULT_REPEATS = 5

#: The marker line ``pytest --markers`` shows.
MEASURE_MARKER = (
    "sglang_measure(*servers, workload, concurrency=1, repeats=5): declare the measurements "
    "this test takes with sglang_bench (each server at each concurrency level), so that "
    "they are taken while the server is up, whichever test launched it: each launched "
    "profile is launched once per session, whatever the test order. A test may still "
    "measure what it did not declare, at the price of a relaunch the summary points out."
)

_KEYWORDS = frozenset({"workload", "concurrency", "repeats"})


@dataclass(frozen=True)
class Declared:
    """One measurement a test declared: a server, a workload, a level and its repeats."""

    server: str
    workload: Workload
    concurrency: int
    repeats: int
    #: The first test that declared it (node id).
    test: str

    def key(self) -> tuple[str, Any, int, int]:
        """Return the session cache's key of this measurement."""
        return (self.server, self.workload.key(), self.concurrency, self.repeats)

    def label(self) -> str:
        """Return e.g. ``baseline @ C=64 (x5)``."""
        return f"{self.server} @ C={self.concurrency} (x{self.repeats})"


def declared_by_marker(
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    test: str,
    default_repeats: int = DEFAULT_REPEATS,
) -> list[Declared]:
    """Return the measurements one ``sglang_measure`` marker declares.

    :raises ValueError: naming what is wrong with the marker and how to write it.
    """
    example = (
        "write e.g. @pytest.mark.sglang_measure('baseline', 'eagle3', workload=CHAT, "
        "concurrency=[1, 64], repeats=5)"
    )
    unknown = sorted(set(kwargs) - _KEYWORDS)
    if unknown:
        raise ValueError(f"unknown keyword(s) {', '.join(unknown)}; {example}")
    servers = list(args)
    if not servers or not all(isinstance(s, str) and s for s in servers):
        raise ValueError(f"name one or more servers first, got {tuple(args)!r}; {example}")
    from pytest_sglang.loadgen.workload import Workload  # not with the plugin: marked tests only
    from pytest_sglang.measure.budget import check_fills

    workload = kwargs.get("workload")
    if not isinstance(workload, Workload):
        raise ValueError(
            f"workload= must be a pytest_sglang.Workload, got {type(workload).__name__}; {example}"
        )
    levels_given = kwargs.get("concurrency", 1)
    levels = [levels_given] if isinstance(levels_given, int) else list(levels_given)
    if not levels or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1
                             for c in levels):  # fmt: skip
        raise ValueError(
            f"concurrency= must be an integer >= 1 or a list of them, got {levels_given!r}"
        )
    for level in levels:
        check_fills(workload, level)
    repeats = kwargs.get("repeats", default_repeats)
    if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
        raise ValueError(f"repeats= must be an integer >= 1, got {repeats!r}")
    return [
        Declared(server, workload, level, repeats, test)
        for server in servers
        for level in sorted(set(levels))
    ]


class MeasurementPlans:
    """Every measurement the selected tests declared, by server, in declaration order."""

    def __init__(self, declared: Iterable[Declared] = ()) -> None:
        self._by_key: dict[tuple[str, Any, int, int], Declared] = {}
        for item in declared:
            self._by_key.setdefault(item.key(), item)

    def __len__(self) -> int:
        return len(self._by_key)

    def for_server(self, server: str) -> list[Declared]:
        """Return the measurements declared for ``server``, lower levels first."""
        found = [d for d in self._by_key.values() if d.server == server]
        return sorted(found, key=lambda d: d.concurrency)

    def declares(self, key: tuple[str, Any, int, int]) -> bool:
        """Return whether some selected test declared the measurement with this cache key."""
        return key in self._by_key

    def servers(self) -> list[str]:
        """Return the servers some measurement is declared for, in order of declaration."""
        return list(dict.fromkeys(d.server for d in self._by_key.values()))


#: The measurements the selected tests declare (``sglang_measure``), set at collection.
PLANS_KEY = pytest.StashKey[MeasurementPlans]()


def declared_measurements(items: Iterable[pytest.Item]) -> MeasurementPlans:
    """Return what the ``sglang_measure`` markers of ``items`` declare, in their order.

    :raises pytest.UsageError: a malformed marker, naming the test and the fix.
    """
    declared: list[Declared] = []
    for item in items:
        for marker in item.iter_markers("sglang_measure"):
            try:
                declared += declared_by_marker(marker.args, marker.kwargs, test=item.nodeid)
            except ValueError as exc:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_measure: {exc}"
                ) from None
    return MeasurementPlans(declared)
