"""Each test report's evidence, taken once; concise properties for JUnit XML in its place.

The full evidence stays in the JSON report; the properties are listed in docs/ci.md.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
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
    """Return the ``sglang`` entries this report added to its test (taken by the ledger)."""
    return list(_ENTRIES.get(report, ()))


def add_entry(report: pytest.TestReport, entry: Entry) -> None:
    """Add ``entry`` to ``report``'s entries: plugins running after see it, and JUnit too."""
    _ENTRIES.setdefault(report, []).append(entry)


@dataclass(eq=False)
class EntryLedger:
    """Takes the ``sglang`` entries out of each test report, leaves concise properties.

    Registered on the controller only (``plugin.py``): on an xdist worker the entries must
    travel with the report.
    """

    redact: Redactor = field(default_factory=Redactor)
    #: How many raw entries of each test (id and xdist worker) were taken already.
    _seen: dict[tuple[str, str], int] = field(default_factory=dict, init=False)
    #: The running test's reports so far, whose properties the teardown refreshes.
    _reports: dict[tuple[str, str], list[pytest.TestReport]] = field(
        default_factory=dict, init=False
    )

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> Generator[None, None, None]:
        """Take the report's entries before any other implementation of the hook runs."""
        self.take(report)
        return (yield)

    def take(self, report: pytest.TestReport) -> None:
        """Take ``report``'s new entries (see :func:`report_entries`), set its properties."""
        # Under xdist, the same test id could run on two workers (--dist each).
        key = (report.nodeid, str(getattr(report, "worker_id", "")))
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
        concise = concise_properties(entries, self.redact)
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


def _number(value: object, digits: int, scale: float = 1.0) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value) * scale, digits)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def _clip_all(value: Any, limit: int) -> Any:
    """Return ``value`` with every string in it clipped to ``limit`` characters."""
    if isinstance(value, str):
        return _clip(value, limit)
    if isinstance(value, dict):
        return {key: _clip_all(item, limit) for key, item in value.items()}
    return [_clip_all(item, limit) for item in value] if isinstance(value, list) else value


def json_value(value: Any, redact: Redactor) -> str:
    """Return ``value`` as redacted compact JSON, its strings clipped shorter until it fits."""
    value = redact.json(value)
    limit = MAX_VALUE_CHARS
    while limit >= 1:
        compact = json.dumps(_clip_all(value, limit), separators=(",", ":"), ensure_ascii=False)
        if len(text := redact(compact)) <= MAX_VALUE_CHARS:
            return text
        limit //= 2
    return json.dumps({"clipped": True, "see": "the JSON report (--sglang-report)"})


def _verdict_value(entry: Mapping[str, Any]) -> dict[str, Any]:
    # The evidence is a verdict's own (``Verdict.as_dict``): a comparison's figures, a crossover.
    evidence = entry.get("evidence") or {}
    comparison = evidence.get("comparison") or {}
    crossover = evidence.get("crossover") or {}
    body: dict[str, Any] = {k: entry.get(k) for k in ("kind", "outcome", "metric")}
    numbers = {k: _number(comparison.get(k), 4) for k in ("ratio", "lower_bound", "p_value")}
    body.update({k: v for k, v in numbers.items() if v is not None})
    if "level" in crossover:
        body["level"] = crossover["level"]
    return {**body, "summary": str(entry.get("summary", ""))}


def concise_properties(entries: Sequence[Entry], redact: Redactor) -> list[tuple[str, object]]:
    """Return a test's concise JUnit properties (docs/ci.md), the same for the same entries."""
    props: list[tuple[str, object]] = []
    verdicts = [e for e in entries if e["record"] == "verdict"]
    outcomes = {str(v["outcome"]) for v in verdicts}
    worst = next((o for o in _VERDICT_ORDER if o in outcomes), None)
    props += [("sglang.verdict", worst)] if worst is not None else []
    for index, verdict in enumerate(verdicts, 1):
        props.append((f"sglang.verdict.{index}", json_value(_verdict_value(verdict), redact)))
    props += _measurement_properties(entries, redact)
    servers = {str(e["name"]): e for e in entries if e["record"] == "server"}
    for name, server in servers.items():
        body = {key: server.get(key) for key in ("url", "model", "version")}
        props.append((f"sglang.server.{_name(name)}", json_value(body, redact)))
    for entry in entries:
        if entry["record"] == "server_failure":
            body = {key: entry.get(key) for key in ("error", "phase", "exit_code")}
            body["message"] = next(iter(str(entry.get("message", "")).strip().splitlines()), "")
            name = f"sglang.server_failure.{_name(entry['server'])}"
            props.append((name, json_value(body, redact)))
    gpus = next((e for e in reversed(entries) if e["record"] == "gpus"), None)
    if gpus is not None and gpus["names"]:
        counts = Counter(str(gpu) for gpu in gpus["names"])
        props.append(("sglang.gpus", json_value(dict(counts), redact)))
    # Anything not built above still must not exceed the limit.
    return [(name, _clip(redact(str(value)), MAX_VALUE_CHARS)) for name, value in props]


def _measurement_properties(entries: Sequence[Entry], redact: Redactor) -> list[tuple[str, object]]:
    # The latest of each (server, workload, level): a cached measurement is recorded again.
    measured = [e for e in entries if e["record"] == "measurement"]
    rows = {json.dumps([e["server"], e["workload"], e["concurrency"]]): e for e in measured}
    # Each workload's tag in the names: ``.w1``, ``.w2``... where there are several.
    keys = dict.fromkeys(json.dumps(e["workload"], sort_keys=True) for e in measured)
    tags = {key: f".w{index}" if len(keys) > 1 else "" for index, key in enumerate(keys, 1)}
    props: list[tuple[str, object]] = [
        (f"sglang.workload{tag}", json_value(json.loads(key), redact)) for key, tag in tags.items()
    ]
    for row in sorted(rows.values(), key=lambda r: (str(r["server"]), int(r["concurrency"]))):
        runs = row["runs"]
        tag = tags[json.dumps(row["workload"], sort_keys=True)]
        base = f"sglang.{_name(row['server'])}{tag}.c{row['concurrency']}"
        rate = _number(run_median(runs, "output_throughput"), 1)
        figures = {
            # A negative rate (a server's negative token counts) is no speed.
            "output_tok_s": None if rate is None or rate < 0 else rate,
            "ttft_p50_ms": _number(run_median(runs, "ttft.p50"), 2, 1000),
            "itl_p50_ms": _number(run_median(runs, "itl.p50"), 3, 1000),
            "runs": len(runs),
            "errors": sum(int(run.get("failed", 0) or 0) for run in runs),
        }
        props += [(f"{base}.{key}", value) for key, value in figures.items() if value is not None]
        if row.get("cut"):  # a timeout or an interrupt cut it: what, and in which run
            props.append((f"{base}.cut", str(row["cut"])))
    return props
