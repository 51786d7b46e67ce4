"""The results summary, rendered twice: for the terminal and as Markdown.

One table per workload (server x concurrency, medians over runs), then the verdicts. The
Markdown typically goes to ``$GITHUB_STEP_SUMMARY``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_sglang.report.entries import (
    MeasurementRow,
    ServerEntry,
    VerdictRow,
    join_levels,
    load_cell,
    run_median,
    split_levels,
)

__all__ = ["emulated_speedups", "render_markdown", "render_tables"]

#: Column titles and their widths in the terminal table.
COLUMNS = (
    ("server", 14), ("C", 5), ("runs", 4), ("out tok/s", 10), ("TTFT p50", 9),
    ("TTFT p99", 9), ("ITL p50", 8), ("accept", 7), ("errors", 6),
)  # fmt: skip


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def _cells(entry: MeasurementRow) -> list[str]:
    """One row's cells, in ``COLUMNS`` order: medians over the runs, times in ms."""
    runs = entry["runs"]
    return [
        str(entry["server"])
        + (" (cut)" if entry.get("cut") else "")
        + (" (invalid)" if _failed_checks(entry) else ""),
        load_cell(entry),
        str(len(runs)),
        _fmt(run_median(runs, "output_throughput")),
        _fmt(run_median(runs, "ttft.p50"), 1000),
        _fmt(run_median(runs, "ttft.p99"), 1000),
        _fmt(run_median(runs, "itl.p50"), 1000, 2),
        _fmt(run_median(runs, "acceptance_length"), digits=2),
        str(sum(int(run.get("failed", 0)) for run in runs)),
    ]


def _failed_checks(entry: MeasurementRow) -> dict[str, int]:
    """Return the validity checks that failed in the entry's runs: name -> runs."""
    failed: dict[str, int] = {}
    for run in entry["runs"]:
        for check in run.get("checks", ()):
            if check.get("passed") is False:
                failed[check["name"]] = failed.get(check["name"], 0) + 1
    return failed


def _title(workload: Mapping[str, Any]) -> str:
    return (
        f"workload: {workload['endpoint']}, input {workload['input_len']}, output "
        f"{workload['output_len']} tokens, {workload['requests']} requests"
        + (
            f" (or {workload['requests_per_slot']} per slot)"
            if workload.get("requests_per_slot")
            else ""
        )
        + (
            f", dataset {str(workload['dataset']).rsplit('/', 1)[-1]}"
            if workload.get("dataset")
            else ""
        )
        + (f", {workload['turns']}-turn sessions" if workload.get("turns") else "")
        + "; medians over runs, times in ms"
    )


def emulated_speedups(servers: Sequence[ServerEntry]) -> dict[str, float]:
    """Return the launched emulators by server name, with their ``--emulator-speedup``.

    An emulator's tok/s are its performance model's, divided by the speed-up: the tables say
    so, so that nobody reads them as a GPU's figures.
    """
    found: dict[str, float] = {}
    for server in servers:
        launch = server.get("launch") or {}
        if launch.get("launcher") != "emulator":
            continue
        speedup = 1.0
        command = [str(arg) for arg in launch.get("command", [])]
        for index, arg in enumerate(command):
            value = None
            if arg == "--emulator-speedup" and index + 1 < len(command):
                value = command[index + 1]
            elif arg.startswith("--emulator-speedup="):
                value = arg.partition("=")[2]
            if value is not None:
                try:
                    speedup = float(value)
                except ValueError:
                    continue
        found[server["name"]] = speedup
    return found


def _emulated_note(rows: Sequence[MeasurementRow], emulated: Mapping[str, float]) -> str:
    """Return the title's note on the emulated servers among ``rows`` (empty if none)."""
    names = sorted({str(row["server"]) for row in rows if row["server"] in emulated})
    if not names:
        return ""
    notes = []
    for speedup in sorted({emulated[name] for name in names}):
        which = ", ".join(name for name in names if emulated[name] == speedup)
        speed = "in real time" if speedup == 1 else f"at {speedup:g}x the modelled GPU's speed"
        notes.append(f"emulated {speed}: {which}")
    return "; " + "; ".join(notes)


def _by_workload(
    measurements: Sequence[MeasurementRow],
) -> list[tuple[str, list[list[str]]]]:
    """Group rows by workload: (description, rows sorted by concurrency, then server)."""
    groups: dict[str, list[MeasurementRow]] = {}
    for entry in measurements:
        groups.setdefault(json.dumps(entry["workload"], sort_keys=True), []).append(entry)
    tables = []
    for key, entries in groups.items():
        workload = json.loads(key)
        title = _title(workload)
        ordered = sorted(entries, key=lambda e: (e["concurrency"], e["server"]))
        tables.append((title, [_cells(entry) for entry in ordered]))
    return tables


def _rows_titled(measurements: Sequence[MeasurementRow], title: str) -> list[MeasurementRow]:
    """Return the measurements of the table called ``title``."""
    return [e for e in measurements if _title(e["workload"]) == title]


def _row_splits(measurements: Sequence[MeasurementRow], title: str) -> list[str]:
    """Return the notes under the table called ``title``.

    TTFT splits, failed validity checks, cut measurements, and the checks that did not apply
    to a server declared OpenAI-compatible.
    """
    ordered = sorted(
        _rows_titled(measurements, title), key=lambda e: (e["concurrency"], e["server"])
    )
    skipped = {e["server"]: e["not_applicable"] for e in ordered if e.get("not_applicable")}
    notes = [
        f"{server} is an OpenAI-compatible server; checks that did not apply: " + ", ".join(checks)
        for server, checks in skipped.items()
    ]
    cuts = [
        f"{e['server']} @ C={e['concurrency']} was cut by {e['cut']}: {len(e['runs'])} "
        "run(s) shown, the cut one with the requests it finished"
        for e in ordered
        if e.get("cut")
    ]
    invalid = [
        f"{e['server']} @ C={load_cell(e)}: validity check failed: "
        + ", ".join(f"{name} ({n} of {len(e['runs'])} runs)" for name, n in failed.items())
        for e in ordered
        if (failed := _failed_checks(e))
    ]
    breakdowns = [text for text in (_run_breakdowns(e) for e in ordered) if text]
    return breakdowns + invalid + cuts + notes


def _tag(verdict: VerdictRow) -> str:
    # A crossover is a finding, not a pass or a fail: its assertions come separately.
    return "CROSSOVER" if verdict["outcome"] == "finding" else verdict["outcome"].upper()


def render_tables(
    measurements: Sequence[MeasurementRow],
    verdicts: Sequence[VerdictRow],
    *,
    emulated: Mapping[str, float] | None = None,
) -> list[str]:
    """Return the terminal summary: one table per workload, the verdicts, then the warnings.

    Each thing is said once: a per-level table two verdicts share is printed under the
    first, and each warning once, with every load level and test it was given for (the
    JSON and Markdown reports keep each verdict's own list).

    :param emulated: the emulated servers and their speed-ups (:func:`emulated_speedups`),
        named in each table's title line.
    """
    lines: list[str] = []

    def line(cells: list[str]) -> str:
        first, *rest = zip(cells, (width for _, width in COLUMNS), strict=True)
        return " ".join([f"{first[0]:<{first[1]}}", *(f"{c:>{w}}" for c, w in rest)])

    for title, rows in _by_workload(measurements):
        note = _emulated_note(_rows_titled(measurements, title), emulated or {})
        lines += [title + note, line([name for name, _ in COLUMNS])]
        lines += [line(row) for row in rows]
        lines += _row_splits(measurements, title)
        lines.append("")
    tables: dict[str, str] = {}
    warnings: dict[tuple[str, bool], tuple[set[int], list[str]]] = {}
    for verdict in verdicts:
        test = verdict["test"]
        lines.append(f"[{_tag(verdict)}] {test}: {verdict['summary']}")
        table = verdict.get("table")
        if verdict["kind"] == "find_crossover" and table:
            if table in tables:
                lines.append(f"    (per-level table as under {tables[table]})")
            else:
                tables[table] = test
                lines += [f"    {row}" for row in table.splitlines()]
        lines += [f"    {line}" for line in breakdown_lines(verdict.get("evidence", {}))]
        for warning in verdict.get("warnings", []):
            levels, text = split_levels(warning)
            # A warning without levels holds at every level: never merged into one that has.
            found, tests = warnings.setdefault((text, bool(levels)), (set(), []))
            found.update(levels)
            tests += [] if test in tests else [test]
    for (text, _), (levels, tests) in warnings.items():
        lines.append(f"warning: {join_levels(levels, text)} [{', '.join(tests)}]")
    return lines


# -- where TTFT went (issue 12) -------------------------------------------------------------------


def breakdown_lines(evidence: Mapping[str, Any]) -> list[str]:
    """Return the TTFT split of each server a verdict compared, from its evidence.

    ``evidence["ttft_breakdown"]`` maps a server to the medians over its runs of each part's
    p50 and p99 (:func:`pytest_sglang.measure.breakdown.breakdown_summary`).
    """
    found = evidence.get("ttft_breakdown")
    if not isinstance(found, Mapping):
        return []
    lines = []
    for server, summary in found.items():
        try:
            lines.append(f"TTFT split, {server}: {_split_text(summary)}")
        except (KeyError, TypeError):
            continue
    return lines


def _split_text(summary: Mapping[str, Any]) -> str:
    parts = []
    for stat in ("p50", "p99"):
        ttft = summary["ttft"][stat] * 1000
        pieces = " + ".join(
            f"{name} {summary[name][stat] * 1000:.1f}" for name in ("queue", "prefill", "rest")
        )
        parts.append(f"{stat} {ttft:.1f} ms = {pieces}")
    return "; ".join(parts) + " ms (queue and prefill as the server reports them)"


def _run_breakdowns(entry: MeasurementRow) -> str | None:
    """Return a row's TTFT split when its runs carry one (``ttft_breakdown`` per run)."""
    splits: list[Mapping[str, Any]] = [
        split
        for run in entry["runs"]
        if isinstance(split := run.get("ttft_breakdown"), Mapping) and split.get("ttft")
    ]
    if not splits:
        return None
    median: dict[str, Any] = {}
    for name in ("ttft", "queue", "prefill", "rest"):
        values = [s[name] for s in splits if isinstance(s.get(name), Mapping)]
        if len(values) != len(splits):
            return None
        median[name] = {
            stat: statistics.median(float(v[stat]) for v in values) for stat in ("p50", "p99")
        }
    return f"TTFT split, {entry['server']} @ C={entry['concurrency']}: {_split_text(median)}"


def _md(text: object) -> str:
    """Escape what would break a Markdown table cell or start markup."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _xychart(rows: Sequence[list[str]]) -> list[str]:
    """Return a Mermaid ``xychart-beta`` of output throughput against concurrency.

    GitHub renders it in a job summary. One line per server (xychart draws no legend: the
    line under the chart names them in order); a server missing a level is left out and
    named. Nothing for a single level.
    """
    levels = sorted({int(row[1]) for row in rows})
    if len(levels) < 2:
        return []
    servers: dict[str, dict[int, str]] = {}
    for row in rows:
        servers.setdefault(row[0], {})[int(row[1])] = row[3]
    drawn = {
        name: points
        for name, points in servers.items()
        if all(points.get(c, "-") != "-" for c in levels)
    }
    if not drawn:
        return []
    out = [
        "```mermaid",
        "xychart-beta",
        '    title "Output throughput against concurrency"',
        '    x-axis "concurrency" [' + ", ".join(str(c) for c in levels) + "]",
        '    y-axis "output tok/s (median over runs)"',
    ]
    out += ["    line [" + ", ".join(points[c] for c in levels) + "]" for points in drawn.values()]
    out += ["```", ""]
    names = ", ".join(f"{i + 1}. {_md(name)}" for i, name in enumerate(drawn))
    left = [name for name in servers if name not in drawn]
    out.append(
        f"_Lines in order: {names}._"
        + (f" _Not drawn (levels missing): {_md(', '.join(left))}._" if left else "")
    )
    out.append("")
    return out


def render_markdown(
    measurements: Sequence[MeasurementRow],
    verdicts: Sequence[VerdictRow],
    *,
    title: str = "pytest-sglang results",
    note: str | None = None,
    emulated: Mapping[str, float] | None = None,
) -> str:
    """Return the summary as GitHub-flavoured Markdown (tables, verdicts, evidence folded).

    :param emulated: as :func:`render_tables`.
    """
    out = [f"## {_md(title)}", ""]
    if note:
        out += [f"_{_md(note)}_", ""]
    if not measurements and not verdicts:
        out += ["No measurements or verdicts were recorded.", ""]
    for heading, rows in _by_workload(measurements):
        heading_note = _emulated_note(_rows_titled(measurements, heading), emulated or {})
        out += [f"**{_md(heading[0].upper() + heading[1:] + heading_note)}**", ""]
        out.append("| " + " | ".join(name for name, _ in COLUMNS) + " |")
        out.append("|" + "|".join([" --- "] + [" ---: "] * (len(COLUMNS) - 1)) + "|")
        out += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in rows]
        out.append("")
        out += [f"- {_md(split)}" for split in _row_splits(measurements, heading)]
        out += _xychart(rows)
    if verdicts:
        out += ["**Verdicts**", ""]
    for verdict in verdicts:
        out.append(f"- **{_tag(verdict)}** `{verdict['test']}`: {_md(verdict['summary'])}")
        out += [f"  - {_md(line)}" for line in breakdown_lines(verdict.get("evidence", {}))]
        out += [f"  - warning: {_md(w)}" for w in verdict.get("warnings", [])]
        evidence = verdict.get("table")
        if evidence:
            # Fenced, so the fixed-width evidence table keeps its columns.
            out += ["", "  <details><summary>evidence</summary>", "", "  ```"]
            out += [f"  {row}" for row in str(evidence).splitlines()]
            out += ["  ```", "", "  </details>", ""]
    return "\n".join(out).rstrip("\n") + "\n"
