"""Each test report's evidence, taken once; concise properties for JUnit XML in its place.

On the controller, before any other plugin sees a report, :class:`EntryLedger` takes the
``sglang`` entries out of ``user_properties`` (keeping the new ones for
:func:`report_entries`) and leaves concise properties for ``--junitxml`` in their place
(listed in docs/ci.md, "JUnit XML"). The full evidence stays in the JSON report.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Any, cast

import pytest

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.report.entries import Entry, run_median

__all__ = [
    "MAX_VALUE_CHARS",
    "PROPERTY_PREFIX",
    "EntryLedger",
    "add_entry",
    "concise_properties",
    "report_entries",
]

#: The longest property value written (CI test reporters show them in one line).
MAX_VALUE_CHARS = 500
#: Every concise property's name starts with this.
PROPERTY_PREFIX = "sglang."
#: The ``user_properties`` name of a full entry.
ENTRY_NAME = "sglang"

#: The new entries each report brought, by report (the controller's report objects).
_ENTRIES: weakref.WeakKeyDictionary[pytest.TestReport, list[Entry]] = weakref.WeakKeyDictionary()


def report_entries(report: pytest.TestReport) -> list[Entry]:
    """Return the ``sglang`` entries this report added to its test (none seen before).

    Filled by :class:`EntryLedger` before any other plugin sees the report; empty for a
    report the ledger did not take (no entries, or no ledger registered).
    """
    return list(_ENTRIES.get(report, ()))


def add_entry(report: pytest.TestReport, entry: Entry) -> None:
    """Add ``entry`` to ``report``'s entries: plugins running after see it, and JUnit too."""
    _ENTRIES.setdefault(report, []).append(entry)


def _test_key(report: pytest.TestReport) -> tuple[str, str | None]:
    # Under xdist, the same test id could run on two workers (--dist each).
    worker = getattr(report, "worker_id", None)
    return report.nodeid, None if worker is None else str(worker)


class EntryLedger:
    """Takes the ``sglang`` entries out of each test report, leaves concise properties.

    Registered on the controller only (``plugin.py``): on an xdist worker the entries must
    travel with the report.
    """

    def __init__(self, redact: Redactor | None = None) -> None:
        self._redact = redact or Redactor()
        #: How many raw entries of each test were taken already.
        self._seen: dict[tuple[str, str | None], int] = {}
        #: The running test's reports so far, whose properties the teardown refreshes.
        self._reports: dict[tuple[str, str | None], list[pytest.TestReport]] = {}

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        """Take the report's entries before any other implementation of the hook runs."""
        self.take(report)
        return (yield)

    def take(self, report: pytest.TestReport) -> None:
        """Take ``report``'s new entries (see :func:`report_entries`), set its properties."""
        key = _test_key(report)
        raw = [value for name, value in report.user_properties if name == ENTRY_NAME]
        seen = self._seen.get(key, 0)
        if len(raw) < seen:  # the test ran again with fresh properties (a rerun)
            seen = 0
        fresh = [cast("Entry", v) for v in raw[seen:] if isinstance(v, dict) and "record" in v]
        self._seen[key] = len(raw)
        if fresh:
            _ENTRIES.setdefault(report, []).extend(fresh)
        reports = self._reports.setdefault(key, [])
        reports.append(report)
        # The gate adds verdicts to a call report after this wrapper ran: the teardown
        # report refreshes every report of the test (junitxml may close on the call report).
        entries = [entry for r in reports for entry in _ENTRIES.get(r, ())]
        concise = concise_properties(entries, self._redact)
        for each in reports if report.when == "teardown" else [report]:
            each.user_properties = [
                (name, value)
                for name, value in each.user_properties
                if name != ENTRY_NAME and not str(name).startswith(PROPERTY_PREFIX)
            ] + concise
        if report.when == "teardown":
            del self._reports[key]


# -- the concise properties -----------------------------------------------------------------

_VERDICT_ORDER = ("fail", "inconclusive", "pass", "finding")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _name(text: object) -> str:
    return _NAME_UNSAFE.sub("_", str(text)) or "_"


def _number(value: object, digits: int = 1) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), digits)


def _longest_string(value: Any, path: tuple[Any, ...] = ()) -> tuple[int, tuple[Any, ...]]:
    if isinstance(value, str):
        return len(value), path
    items: Iterable[tuple[Any, Any]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    best: tuple[int, tuple[Any, ...]] = (-1, ())
    for key, item in items:
        found = _longest_string(item, (*path, key))
        if found[0] > best[0]:
            best = found
    return best


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def json_value(value: Any, redact: Redactor, limit: int = MAX_VALUE_CHARS) -> str:
    """Return ``value`` as compact JSON of at most ``limit`` characters, redacted.

    Too long: the longest strings inside are shortened (ending in ``…``) until it fits.
    """
    value = redact.json(value)
    for _ in range(64):
        text = redact(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
        if len(text) <= limit:
            return text
        length, path = _longest_string(value)
        if length <= 1:
            break
        parent = value
        for key in path[:-1]:
            parent = parent[key]
        if not path:
            value = _clip(value, length // 2)
        else:
            parent[path[-1]] = _clip(parent[path[-1]], length // 2)
    return json.dumps({"clipped": True, "see": "the JSON report (--sglang-report)"})


def _text_value(text: str, redact: Redactor) -> str:
    return _clip(redact(text), MAX_VALUE_CHARS)


def _verdict_value(entry: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": entry.get("kind"),
        "outcome": entry.get("outcome"),
        "metric": entry.get("metric"),
    }
    evidence = entry.get("evidence")
    comparison = evidence.get("comparison") if isinstance(evidence, Mapping) else None
    if isinstance(comparison, Mapping):
        for key in ("ratio", "lower_bound", "p_value"):
            number = _number(comparison.get(key), 4)
            if number is not None:
                body[key] = number
    crossover = evidence.get("crossover") if isinstance(evidence, Mapping) else None
    if isinstance(crossover, Mapping) and "level" in crossover:
        body["level"] = crossover.get("level")
    body["summary"] = str(entry.get("summary", ""))
    return body


def concise_properties(entries: Sequence[Entry], redact: Redactor) -> list[tuple[str, object]]:
    """Return a test's concise JUnit properties from its entries (docs/ci.md, "JUnit XML").

    Pure: the same entries give the same properties, in a stable order.
    """
    props: list[tuple[str, object]] = []
    verdicts = [e for e in entries if e["record"] == "verdict"]
    outcomes = {str(v["outcome"]) for v in verdicts}
    worst = next((o for o in _VERDICT_ORDER if o in outcomes), None)
    if worst is not None:
        props.append(("sglang.verdict", worst))
    for index, verdict in enumerate(verdicts, 1):
        props.append((f"sglang.verdict.{index}", json_value(_verdict_value(verdict), redact)))
    props += _measurement_properties(entries, redact)
    servers: dict[str, Mapping[str, Any]] = {}
    for entry in entries:
        if entry["record"] == "server":
            servers[str(entry["name"])] = entry
    for name, server in servers.items():
        body = {
            "url": server.get("url"),
            "model": server.get("model"),
            "version": server.get("version"),
        }
        props.append((f"sglang.server.{_name(name)}", json_value(body, redact)))
    for entry in entries:
        if entry["record"] == "server_failure":
            message = str(entry.get("message", "")).strip().splitlines()
            body = {
                "error": entry.get("error"),
                "phase": entry.get("phase"),
                "exit_code": entry.get("exit_code"),
                "message": message[0] if message else "",
            }
            props.append(
                (f"sglang.server_failure.{_name(entry['server'])}", json_value(body, redact))
            )
    gpus = next((e for e in reversed(entries) if e["record"] == "gpus"), None)
    if gpus is not None and gpus["names"]:
        counts: dict[str, int] = {}
        for gpu in gpus["names"]:
            counts[str(gpu)] = counts.get(str(gpu), 0) + 1
        props.append(("sglang.gpus", json_value(counts, redact)))
    # Anything not built above still must not exceed the limit.
    return [(name, _text_value(str(value), redact)) for name, value in props]


def _measurement_properties(entries: Sequence[Entry], redact: Redactor) -> list[tuple[str, object]]:
    # The latest of each (server, workload, level): a cached measurement is recorded again.
    rows: dict[str, Mapping[str, Any]] = {}
    workloads: list[str] = []
    for entry in entries:
        if entry["record"] != "measurement":
            continue
        workload = json.dumps(entry["workload"], sort_keys=True)
        if workload not in workloads:
            workloads.append(workload)
        key = json.dumps([entry["server"], workload, entry["concurrency"]])
        rows.pop(key, None)
        rows[key] = entry
    props: list[tuple[str, object]] = []
    several = len(workloads) > 1
    for index, workload in enumerate(workloads, 1):
        name = f"sglang.workload.w{index}" if several else "sglang.workload"
        props.append((name, json_value(json.loads(workload), redact)))
    ordered = sorted(rows.values(), key=lambda r: (str(r["server"]), int(r["concurrency"])))
    for row in ordered:
        runs = row["runs"]
        tag = f".w{workloads.index(json.dumps(row['workload'], sort_keys=True)) + 1}"
        base = f"sglang.{_name(row['server'])}{tag if several else ''}.c{row['concurrency']}"
        figures: dict[str, float | int | None] = {
            # A negative rate (a server's negative token counts) is no speed.
            "output_tok_s": _nonnegative(_number(run_median(runs, "output_throughput"), 1)),
            "ttft_p50_ms": _number(_scaled(run_median(runs, "ttft.p50")), 2),
            "itl_p50_ms": _number(_scaled(run_median(runs, "itl.p50")), 3),
            "runs": len(runs),
            "errors": sum(int(run.get("failed", 0) or 0) for run in runs),
        }
        props += [(f"{base}.{key}", value) for key, value in figures.items() if value is not None]
        if row.get("cut"):  # a timeout or an interrupt cut it: what, and in which run
            props.append((f"{base}.cut", str(row["cut"])))
    return props


def _nonnegative(value: float | None) -> float | None:
    return None if value is None or value < 0 else value


def _scaled(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000
