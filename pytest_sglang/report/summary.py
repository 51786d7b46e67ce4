"""The results summary, for the terminal and as Markdown (typically ``$GITHUB_STEP_SUMMARY``).

One table per workload (server x concurrency, medians over runs), then the verdicts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from pytest_sglang.report.entries import (
    MeasurementRow,
    ServerEntry,
    VerdictRow,
    run_values,
    warning_tests,
)

__all__ = ["describe_workload", "render_markdown", "render_tables", "table"]

#: Column titles and their widths in the terminal table.
COLUMNS = (
    ("server", 14), ("C", 5), ("runs", 4), ("out tok/s", 10), ("TTFT p50", 9),
    ("TTFT p99", 9), ("ITL p50", 8), ("accept", 7), ("errors", 6),
)  # fmt: skip
HEADER = [name for name, _ in COLUMNS]

Row = TypeVar("Row", bound=Mapping[str, Any])


def _md(value: object) -> str:
    """Escape what would break a Markdown table cell or start markup."""
    text = "-" if value is None else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    right_from: int = 1,
    *,
    markdown: bool = False,
) -> list[str]:
    """Return a table's lines, Markdown or fixed-width, right-aligned from ``right_from`` on."""
    if markdown:
        rule = ["---"] * right_from + ["---:"] * (len(header) - right_from)
        return ["| " + " | ".join(_md(c) for c in row) + " |" for row in [header, rule, *rows]]
    widths = [width for _, width in COLUMNS]
    aligns = "<" * right_from + ">" * (len(header) - right_from)
    return [
        " ".join(f"{c:{a}{w}}" for c, a, w in zip(row, aligns, widths, strict=True))
        for row in [header, *rows]
    ]


def _failed_checks(entry: MeasurementRow) -> Counter[str]:
    """Return the validity checks that failed in the entry's runs: name -> runs."""
    return Counter(
        check["name"]
        for run in entry["runs"]
        for check in run.get("checks", ())
        if check.get("passed") is False
    )


def _median(values: Sequence[float], scale: float, digits: int) -> str:
    return f"{statistics.median(values) * scale:.{digits}f}" if values else "-"


def cells(
    entry: MeasurementRow, figure: Callable[[Sequence[float], float, int], str] = _median
) -> list[str]:
    """Return a measurement's table row, in ``HEADER`` order; ``figure`` gives each figure.

    A figure is the median over the runs by default, times in ms. A negative rate (a server's
    negative token counts) is no speed: it shows as unmeasured.
    """
    runs = entry["runs"]
    rates = [v for v in run_values(runs, "output_throughput") if v >= 0]
    return [
        str(entry["server"])
        + (" (cut)" if entry.get("cut") else "")
        + (" (invalid)" if _failed_checks(entry) else ""),
        load_cell(entry),
        str(len(runs)),
        figure(rates, 1, 1),
        figure(run_values(runs, "ttft.p50"), 1000, 1),
        figure(run_values(runs, "ttft.p99"), 1000, 1),
        figure(run_values(runs, "itl.p50"), 1000, 2),
        figure(run_values(runs, "acceptance_length"), 1, 2),
        str(sum(int(run.get("failed", 0)) for run in runs)),
    ]


def load_cell(entry: Mapping[str, Any]) -> str:
    """Return the load cell: the concurrency, or an open loop's rate (``20/s``, ``20/s <=64``)."""
    rate = entry.get("rate")
    if rate is None:
        return str(entry["concurrency"])
    cap = entry.get("max_concurrency")
    return f"{rate:g}/s" + (f" <={cap}" if cap else "")


def describe_workload(workload: Mapping[str, Any]) -> str:
    """Return a workload in words: endpoint, lengths, requests, dataset and turns."""
    text = (
        f"{workload['endpoint']}, input {workload['input_len']}, output "
        f"{workload['output_len']} tokens, {workload['requests']} requests"
    )
    if workload.get("requests_per_slot"):
        text += f" (or {workload['requests_per_slot']} per slot)"
    if workload.get("dataset"):
        text += f", dataset {str(workload['dataset']).rsplit('/', 1)[-1]}"
    if workload.get("turns"):
        text += f", {workload['turns']}-turn sessions"
    return text


def _emulated_speedups(servers: Sequence[ServerEntry]) -> dict[str, float]:
    """Return the launched emulators' ``--emulator-speedup``s: no emulator reads as a GPU."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--emulator-speedup", type=float, default=1.0)
    found: dict[str, float] = {}
    for server in servers:
        launch = server.get("launch") or {}
        if launch.get("launcher") == "emulator":
            found[server["name"]] = 1.0
            with contextlib.suppress(argparse.ArgumentError):
                known, _ = parser.parse_known_args([str(a) for a in launch.get("command", [])])
                found[server["name"]] = known.emulator_speedup
    return found


def by_workload(rows: Iterable[Row], ignore: Collection[str] = ()) -> dict[str, list[Row]]:
    """Group measurement rows by their workload (its fields in ``ignore`` aside)."""
    groups: dict[str, list[Row]] = {}
    for row in rows:
        workload = {k: v for k, v in row["workload"].items() if k not in ignore}
        groups.setdefault(json.dumps(workload, sort_keys=True), []).append(row)
    return groups


def _workloads(
    measurements: Sequence[MeasurementRow], servers: Sequence[ServerEntry]
) -> Iterator[tuple[str, list[MeasurementRow]]]:
    """Group the measurements by workload: (title, rows by concurrency, then server)."""
    emulated = _emulated_speedups(servers)
    for entries in by_workload(measurements).values():
        workload = describe_workload(entries[0]["workload"])
        title = f"workload: {workload}; medians over runs, times in ms"
        names = sorted({str(e["server"]) for e in entries if e["server"] in emulated})
        for speedup in sorted({emulated[name] for name in names}):
            which = ", ".join(name for name in names if emulated[name] == speedup)
            speed = "in real time" if speedup == 1 else f"at {speedup:g}x the modelled GPU's speed"
            title += f"; emulated {speed}: {which}"
        yield title, sorted(entries, key=lambda e: (e["concurrency"], e["server"]))


def _notes(entries: Sequence[MeasurementRow]) -> list[str]:
    """Return the notes under a table: failed checks, cuts, checks not applied."""
    invalid = [
        f"{e['server']} @ C={load_cell(e)}: validity check failed: "
        + ", ".join(f"{name} ({n} of {len(e['runs'])} runs)" for name, n in failed.items())
        for e in entries
        if (failed := _failed_checks(e))
    ]
    cuts = [
        f"{e['server']} @ C={e['concurrency']} was cut by {e['cut']}: {len(e['runs'])} "
        "run(s) shown, the cut one with the requests it finished"
        for e in entries
        if e.get("cut")
    ]
    skipped = {e["server"]: e["not_applicable"] for e in entries if e.get("not_applicable")}
    openai = [
        f"{server} is an OpenAI-compatible server; checks that did not apply: " + ", ".join(checks)
        for server, checks in skipped.items()
    ]
    return invalid + cuts + openai


def _tag(verdict: VerdictRow) -> str:
    # A crossover is a finding, not a pass or a fail: its assertions come separately.
    return "CROSSOVER" if verdict["outcome"] == "finding" else verdict["outcome"].upper()


def render_tables(
    measurements: Sequence[MeasurementRow],
    verdicts: Sequence[VerdictRow],
    *,
    servers: Sequence[ServerEntry] = (),
) -> list[str]:
    """Return the terminal summary: one table per workload, the verdicts, then the warnings.

    Each thing is said once: a per-level table two verdicts share, each warning (its levels
    and tests merged). ``servers`` (the report's) say which figures are an emulator's.
    """
    lines: list[str] = []
    for title, entries in _workloads(measurements, servers):
        lines += [title, *table(HEADER, [cells(e) for e in entries]), *_notes(entries), ""]
    tables: dict[str, str] = {}
    for verdict in verdicts:
        test = verdict["test"]
        lines.append(f"[{_tag(verdict)}] {test}: {verdict['summary']}")
        evidence = verdict.get("table")
        if verdict["kind"] == "find_crossover" and evidence in tables:
            lines.append(f"    (per-level table as under {tables[evidence]})")
        elif verdict["kind"] == "find_crossover" and evidence:
            tables[evidence] = test
            lines += [f"    {row}" for row in evidence.splitlines()]
        lines += [f"    {line}" for line in breakdown_lines(verdict.get("evidence", {}))]
    warnings = warning_tests((w, v["test"]) for v in verdicts for w in v.get("warnings", []))
    return lines + [f"warning: {text} [{', '.join(tests)}]" for text, tests in warnings.items()]


# -- where TTFT went (issue 12) -------------------------------------------------------------------

_PARTS = ("ttft", "queue", "prefill", "rest")
_STATS = ("p50", "p99")


def breakdown_lines(evidence: Mapping[str, Any]) -> list[str]:
    """Return the TTFT split of each server a verdict compared (``breakdown_summary``)."""
    found = evidence.get("ttft_breakdown")
    splits = found.items() if isinstance(found, Mapping) else ()
    return [f"TTFT split, {name}: {text}" for name, s in splits if (text := _split_text(s))]


def _split_text(split: Mapping[str, Any]) -> str | None:
    """Return a split's parts (p50 and p99, seconds) in ms; None where one is amiss."""
    try:
        ms = {(name, stat): float(split[name][stat]) * 1000 for name in _PARTS for stat in _STATS}
    except (KeyError, TypeError, ValueError):  # no split, or one lacks a part
        return None
    parts = []
    for stat in _STATS:
        pieces = " + ".join(f"{name} {ms[name, stat]:.1f}" for name in _PARTS[1:])
        parts.append(f"{stat} {ms['ttft', stat]:.1f} ms = {pieces}")
    return "; ".join(parts) + " ms (queue and prefill as the server reports them)"


def _xychart(entries: Sequence[MeasurementRow], rows: Sequence[list[str]]) -> list[str]:
    """Return a Mermaid ``xychart-beta`` of output throughput against concurrency.

    GitHub renders it in a job summary. One line per server (xychart draws no legend: the
    line under the chart names them in order); a server missing a level is left out and
    named. Nothing for a single level, nor for an open loop's rates.
    """
    servers: dict[str, dict[int, str]] = {}
    for entry, row in zip(entries, rows, strict=True):
        if entry.get("rate") is None:
            servers.setdefault(row[0], {})[int(entry["concurrency"])] = row[3]
    levels = sorted({level for points in servers.values() for level in points})
    drawn = {
        name: points
        for name, points in servers.items()
        if all(points.get(c, "-") != "-" for c in levels)
    }
    if len(levels) < 2 or not drawn:
        return []
    names = ", ".join(f"{i + 1}. {_md(name)}" for i, name in enumerate(drawn))
    left = [name for name in servers if name not in drawn]
    return [
        "```mermaid",
        "xychart-beta",
        '    title "Output throughput against concurrency"',
        '    x-axis "concurrency" [' + ", ".join(str(c) for c in levels) + "]",
        '    y-axis "output tok/s (median over runs)"',
        *("    line [" + ", ".join(points[c] for c in levels) + "]" for points in drawn.values()),
        "```",
        "",
        f"_Lines in order: {names}._"
        + (f" _Not drawn (levels missing): {_md(', '.join(left))}._" if left else ""),
        "",
    ]


def render_markdown(
    measurements: Sequence[MeasurementRow],
    verdicts: Sequence[VerdictRow],
    *,
    title: str = "pytest-sglang results",
    servers: Sequence[ServerEntry] = (),
    lead: Sequence[str] = (),
) -> str:
    """Return the summary as GitHub-flavoured Markdown (tables, verdicts, evidence folded).

    ``lead``: Markdown lines under the title (a note, a merge's table of its shards).
    """
    out = [f"## {_md(title)}", "", *lead, *([""] if lead else [])]
    if not measurements and not verdicts:
        out += ["No measurements or verdicts were recorded.", ""]
    for heading, entries in _workloads(measurements, servers):
        rows = [cells(e) for e in entries]
        out += [f"**{_md(heading[0].upper() + heading[1:])}**", ""]
        out += [*table(HEADER, rows, markdown=True), ""]
        out += [f"- {_md(note)}" for note in _notes(entries)]
        out += _xychart(entries, rows)
    if verdicts:
        out += ["**Verdicts**", ""]
    for verdict in verdicts:
        out.append(f"- **{_tag(verdict)}** `{verdict['test']}`: {_md(verdict['summary'])}")
        out += [f"  - {_md(line)}" for line in breakdown_lines(verdict.get("evidence", {}))]
        out += [f"  - warning: {_md(w)}" for w in verdict.get("warnings", [])]
        if verdict.get("table"):
            # Fenced, so the fixed-width evidence table keeps its columns.
            out += ["", "  <details><summary>evidence</summary>", "", "  ```"]
            out += [f"  {row}" for row in str(verdict["table"]).splitlines()]
            out += ["  ```", "", "  </details>", ""]
    return "\n".join(out).rstrip("\n") + "\n"
