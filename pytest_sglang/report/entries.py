"""The typed report model: what fixtures, measurements and verdicts hand to the reporters.

Each fact (a server, the GPUs, a measurement, a verdict) travels as ``("sglang", entry)`` in
the test's ``user_properties``, so pytest-xdist carries it to the controller. Bodies are
plain JSON (``schemas/report.schema.json``); the ``record`` key names the kind. Code called
from tests without a fixture at hand (verdicts) records in :data:`CURRENT_ITEM`, which the
plugin sets around each test call.
"""

from __future__ import annotations

import contextvars
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NotRequired, TypeAlias, TypedDict

import pytest

__all__ = [
    "CURRENT_ITEM",
    "REPORT_FORMAT",
    "Entry",
    "GpusEntry",
    "MeasurementBody",
    "MeasurementEntry",
    "MeasurementRow",
    "Schedule",
    "ServerEntry",
    "ServerFailureEntry",
    "VerdictBody",
    "VerdictEntry",
    "VerdictKind",
    "VerdictRow",
    "as_row",
    "group_warnings",
    "record",
    "run_median",
    "run_values",
    "unique_measurements",
    "warning_tests",
]

#: The ``format`` of a JSON results report (``--sglang-report``).
REPORT_FORMAT = "pytest-sglang-report"

#: The assertion that produced a verdict.
VerdictKind: TypeAlias = Literal[
    "assert_faster",
    "assert_at_least",
    "assert_at_most",
    "find_crossover",
    "assert_slo",
    "find_capacity",
    "assert_no_regression",
    "assert_greedy_equivalent",
    "assert_adaptive",
]
#: How a compared server's runs were scheduled: one after the other, or alternating.
Schedule: TypeAlias = Literal["blocks", "interleaved"]


class ServerEntry(TypedDict):
    """A server a test used: identity, readiness, launch details and configuration."""

    record: Literal["server"]
    name: str
    url: str
    version: str | None
    model: str
    readiness: dict[str, Any]
    launch: dict[str, Any] | None
    config: dict[str, Any]
    #: ``openai`` for a server declared plain OpenAI-compatible (absent for SGLang).
    kind: NotRequired[str]
    #: The checks that did not apply to it, and why (``SGLangServer.not_applicable``).
    not_applicable: NotRequired[dict[str, str]]


class GpusEntry(TypedDict):
    """The GPUs the session's probe sees, by name."""

    record: Literal["gpus"]
    names: list[str]


class MeasurementBody(TypedDict):
    """One (server, workload, concurrency) measured ``len(runs)`` times."""

    server: str
    url: str
    workload: dict[str, Any]
    concurrency: int
    schedule: Schedule
    config: dict[str, Any]
    runs: list[dict[str, Any]]
    #: What cut the measurement short (a test timeout, Ctrl-C), when something did.
    cut: NotRequired[str]
    #: How many of ``runs`` are whole, when it was cut (the last one is then the cut run).
    finished_runs: NotRequired[int]
    #: ``openai`` for a server declared plain OpenAI-compatible (absent for SGLang).
    kind: NotRequired[str]
    #: The checks that did not apply to its server, and why.
    not_applicable: NotRequired[dict[str, str]]
    #: An open loop's load: requests per second, arrivals, cap (``concurrency`` is the cap,
    #: or 0 without one).
    rate: NotRequired[float]
    arrival: NotRequired[str]
    max_concurrency: NotRequired[int | None]


class MeasurementEntry(MeasurementBody):
    """A measurement as a test records it."""

    record: Literal["measurement"]


class MeasurementRow(MeasurementBody):
    """A measurement as the report holds it: which test took it."""

    test: str


class VerdictBody(TypedDict):
    """An assertion's outcome and its evidence."""

    kind: VerdictKind
    #: ``finding``: a result reported rather than judged (a crossover).
    outcome: Literal["pass", "fail", "inconclusive", "finding"]
    metric: str
    summary: str
    warnings: list[str]
    evidence: dict[str, Any]
    table: str


class VerdictEntry(VerdictBody):
    """A verdict as a test records it."""

    record: Literal["verdict"]


class VerdictRow(VerdictBody):
    """A verdict as the report holds it: which test asserted it."""

    test: str


class ServerFailureEntry(TypedDict):
    """A server a test needed and could not have: its gate or launch failed, or it died."""

    record: Literal["server_failure"]
    server: str
    #: The error's type: ``ServerNotReady``, ``ServerExited``, ``ServerDied``...
    error: str
    #: The readiness phase that failed, or ``serving`` for a server that died later.
    phase: str | None
    #: The process's exit code when it is known (launched servers; negative: a signal).
    exit_code: int | None
    #: The failure's message, redacted (the log tail and hints included).
    message: str


#: Anything a test records for the report.
Entry: TypeAlias = ServerEntry | GpusEntry | MeasurementEntry | VerdictEntry | ServerFailureEntry

#: The test being run (set by the plugin around each test call).
CURRENT_ITEM: contextvars.ContextVar[pytest.Item | None] = contextvars.ContextVar(
    "pytest_sglang_current_item", default=None
)


def record(entry: Entry) -> None:
    """Append ``("sglang", entry)`` to the running test's ``user_properties``, if any."""
    item = CURRENT_ITEM.get()
    if item is not None:
        item.user_properties.append(("sglang", entry))


def as_row(entry: Mapping[str, Any], test: str) -> dict[str, Any]:
    """Return ``entry`` as the report holds it: ``record`` replaced by the test's id."""
    return {"test": test, **{k: v for k, v in entry.items() if k != "record"}}


def unique_measurements(rows: Iterable[Mapping[str, Any]]) -> list[Any]:
    """Return ``rows`` with each measurement once: its first whole row, else its cut one.

    A cached measurement is recorded by every test that used it, and a cut one is not cached
    (a later test may measure it whole): the JSON report and the saved baseline keep one.
    """
    kept: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        load = [row["concurrency"], row.get("rate"), row.get("arrival")]
        key = json.dumps([row["server"], row["workload"], *load, len(row["runs"])], sort_keys=True)
        if key not in kept or ("cut" in kept[key] and "cut" not in row):
            kept[key] = row
    return list(kept.values())


#: A verdict warning about some load levels starts with them: ``C=70, 100: text``.
_LEVELS = re.compile(r"C=(\d+(?:, \d+)*): ")


def warning_tests(warnings: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """Return each (warning, test)'s text once, its load levels merged, with its tests.

    ``C=70: x`` and ``C=100: x`` are ``C=70, 100: x``; a warning without levels holds at every
    level: it is never merged into one that has them.
    """
    levels: dict[tuple[str, bool], tuple[set[int], list[str]]] = {}
    for warning, test in warnings:
        match = _LEVELS.match(warning)
        text = warning[match.end() :] if match else warning
        found, tests = levels.setdefault((text, bool(match)), (set(), []))
        if match:
            found.update(map(int, match.group(1).split(", ")))
        tests += [] if test in tests else [test]
    return {
        f"C={', '.join(map(str, sorted(found)))}: {text}" if found else text: tests
        for (text, _), (found, tests) in levels.items()
    }


def group_warnings(warnings: Iterable[str]) -> list[str]:
    """Return ``warnings`` with each text once, its load levels merged (``C=70, 100: x``)."""
    return list(warning_tests((warning, "") for warning in warnings))


def run_values(runs: Sequence[Mapping[str, Any]], metric: str) -> list[float]:
    """Return each run's ``metric`` (``ttft.p50``: a statistic of a distribution), where finite."""
    name, _, stat = metric.partition(".")
    values = []
    for run in runs:
        value = run.get(name)
        if stat:
            value = value.get(stat) if isinstance(value, Mapping) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            values.append(float(value))
    return values


def run_median(runs: Sequence[Mapping[str, Any]], metric: str) -> float | None:
    """Return the median over ``runs`` of ``metric`` (None: no run has a finite value)."""
    import statistics  # here: this module loads in every pytest run

    values = run_values(runs, metric)
    return statistics.median(values) if values else None
