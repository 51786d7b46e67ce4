"""The qualification report: one self-contained HTML file for a release decision.

Rendered from a results report (or a stored session), optionally with stored baselines on
the same axes; everything inline, nothing fetched at view time (``docs/baselines.md``).
"""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.report.entries import MeasurementRow
from pytest_sglang.report.plots import render_workload_plots, series_of
from pytest_sglang.report.summary import HEADER, by_workload, cells, describe_workload

__all__ = ["render_html"]

_TITLE = "pytest-sglang qualification report"

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:24px;color:#1d1d1f;
 max-width:1400px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;border-bottom:1px solid #ddd;
 padding-bottom:4px;margin-top:28px}
table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f5f5f7}td.num{text-align:right;font-variant-numeric:tabular-nums}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f7f7f9;padding:8px;overflow-x:auto;border:1px solid #eee}
.badge{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;font-weight:600}
.pass{background:#e3f6e8;color:#156f2c}.fail{background:#fde2e1;color:#a4161a}
.inconclusive{background:#fff4d6;color:#7a5a00}.finding{background:#e6eefc;color:#1c4fa8}
.verdict{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.verdict.fail{border:2px solid #d62728;background:#fff7f7}
.plot svg{max-width:100%;height:auto}.muted{color:#666;font-size:13px}
.summary-fail{background:#fde2e1;border:2px solid #d62728;padding:8px 12px;border-radius:6px}
.summary-ok{background:#e3f6e8;border:1px solid #8fd19e;padding:8px 12px;border-radius:6px}
"""

# Marks the document once laid out: how many plots have a non-empty box, and any error
# (script, console.error, a resource that failed to load) for the headless-browser check.
_GUARD = """
(function(){var errors=[];var root=document.documentElement;
function note(m){errors.push(String(m));root.setAttribute('data-errors',errors.join(' | '));}
window.addEventListener('error',function(e){note(e.message||('failed to load '+
 ((e.target&&(e.target.src||e.target.href))||'a resource')));},true);
var original=console.error;console.error=function(){note(Array.prototype.join.call(
 arguments,' '));return original.apply(console,arguments);};
window.addEventListener('load',function(){var n=0;document.querySelectorAll('.plot svg')
 .forEach(function(s){var b=s.getBoundingClientRect();if(b.width>50&&b.height>50&&
 s.querySelectorAll('path,use,line,polyline').length>0){n++;}});
 root.setAttribute('data-plots-rendered',String(n));
 root.setAttribute('data-errors',errors.join(' | '));});})();
"""


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value))


def _table(header: Sequence[str], rows: Sequence[Sequence[object]], numeric: bool = False) -> str:
    """Return an HTML table; ``numeric``: its columns after the first are right-aligned."""
    num = ' class="num"'
    lines = [[f"<th>{_e(h)}</th>" for h in header]] + [
        [f"<td{num if numeric and i else ''}>{_e(c)}</td>" for i, c in enumerate(row)]
        for row in rows
    ]
    return "<table>" + "".join("<tr>" + "".join(cells) + "</tr>" for cells in lines) + "</table>"


def _median(values: Sequence[float], scale: float, digits: int) -> str:
    """Return the median of the runs' values to two decimals, ± half their range in percent."""
    if not values:
        return "-"
    median = statistics.median(values) * scale
    spread = (max(values) - min(values)) * scale / median * 100 if median else 0.0
    return f"{median:.2f} (±{spread / 2:.1f}%)" if len(values) > 1 else f"{median:.2f}"


def _marks(
    verdicts: Sequence[Mapping[str, Any]], rows: Sequence[MeasurementRow]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """Return the crossovers found and the regressions in ``rows``, as (what, level) each.

    A failed regression verdict is in ``rows`` when its ``evidence.workload`` is one of theirs
    (not the fingerprint's: that has ``requests_per_slot`` resolved), and a point of the plots
    unless its load was an open loop (whose cap is its concurrency).
    """
    workloads = [row["workload"] for row in rows]
    crossovers, regressions = [], []
    for verdict in verdicts:
        evidence = verdict.get("evidence", {})
        found = (evidence.get("crossover") or {}).get("level")
        if verdict.get("kind") == "find_crossover" and isinstance(found, int):
            crossovers.append((f"{evidence.get('spec')}/{evidence.get('base')}", found))
        failed = verdict.get("kind") == "assert_no_regression" and verdict.get("outcome") == "fail"
        fingerprint = evidence.get("fingerprint", {})
        if failed and evidence.get("workload") in workloads and "open_loop" not in fingerprint:
            server = str(evidence.get("a", "")).split(" @ ")[0]
            regressions.append((server, fingerprint.get("concurrency")))
    return crossovers, regressions


def _verdict_html(verdict: Mapping[str, Any]) -> str:
    outcome = str(verdict.get("outcome", ""))
    regression = outcome == "fail" and verdict.get("kind") == "assert_no_regression"
    warnings = "".join(f"<li>{_e(w)}</li>" for w in verdict.get("warnings", []))
    evidence = verdict.get("table") or json.dumps(verdict.get("evidence", {}), indent=1)
    return (
        f'<div class="verdict {_e(outcome)}"><span class="badge {_e(outcome)}">'
        f"{'REGRESSION' if regression else _e(outcome.upper())}</span> "
        f"<code>{_e(verdict.get('kind'))}</code> in <code>{_e(verdict.get('test'))}</code>"
        f"<p>{_e(verdict.get('summary'))}</p>"
        + (f"<ul class=muted>{warnings}</ul>" if warnings else "")
        + f"<details{' open' if outcome == 'fail' else ''}><summary>evidence</summary>"
        f"<pre>{_e(evidence)}</pre></details></div>"
    )


def render_html(
    document: Mapping[str, Any],
    *,
    baselines: Sequence[Mapping[str, Any]] = (),
    no_verdicts: str | None = None,
) -> str:
    """Return a results report (``schemas/report.schema.json``) as one self-contained page.

    ``baselines`` (stored rows with a ``session`` key) are drawn beside the measurements;
    ``no_verdicts`` replaces "No verdicts were recorded" (a session stored without them).
    """
    order = {"fail": 0, "inconclusive": 1}
    verdicts = sorted(document.get("verdicts", []), key=lambda v: order.get(v.get("outcome"), 2))
    failed = [v for v in verdicts if v.get("outcome") == "fail"]
    complete = "complete" if document.get("complete") else "INCOMPLETE (interrupted or running)"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<script>{_GUARD}</script>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_TITLE}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_TITLE}</h1>",
        f'<p class="muted">created {_e(document.get("created"))}, updated '
        f"{_e(document.get('updated'))}; {complete}</p>",
    ]
    if failed:
        summaries = "; ".join(_e(v.get("summary")) for v in failed[:5])
        parts.append(
            f'<p class="summary-fail"><b>{len(failed)} verdict(s) failed</b>: {summaries}</p>'
        )
    elif verdicts:
        parts.append(f'<p class="summary-ok">{len(verdicts)} verdict(s), none failed.</p>')
    environment = [
        (k.replace("_", " "), ", ".join(map(str, v)) if isinstance(v, list) else v)
        for k, v in document.get("environment", {}).items()
    ]
    parts += ["<h2>Environment</h2>", _table(("what", "value"), environment)]
    servers = []
    for server in document.get("servers", []):
        command = Redactor().argv([str(a) for a in (server.get("launch") or {}).get("command", [])])
        ready = (server.get("readiness") or {}).get("total")
        ready_s = f"{ready:.1f}" if isinstance(ready, (int, float)) else ""
        identity = [server.get(key) for key in ("name", "url", "version", "model")]
        servers.append([*identity, " ".join(command) or "(attached)", ready_s])
    if servers:
        header = ("name", "url", "SGLang", "model", "launch command (secrets redacted)")
        parts += ["<h2>Servers</h2>", _table((*header, "ready in (s)"), servers)]
    measurements = list(document.get("measurements", []))
    configs: dict[str, tuple[str, str]] = {}
    for row in measurements:
        text = ", ".join(f"{k}={v}" for k, v in sorted((row.get("config") or {}).items()))
        configs.setdefault(f"{row['server']}|{text}", (str(row["server"]), text))
    if configs:
        parts += [
            "<h2>Configurations (what the fingerprint compares)</h2>",
            _table(("server", "effective configuration (/server_info)"), list(configs.values())),
        ]
    # A baseline's request count may differ from the measurement's.
    stored = by_workload(baselines, ignore={"requests"})
    for index, (key, rows) in enumerate(by_workload(measurements, ignore={"requests"}).items(), 1):
        title = describe_workload(rows[0]["workload"])
        series = series_of(rows) + series_of(stored.get(key, []), baseline=True)
        plots = render_workload_plots(series, title, *_marks(verdicts, rows))
        ordered = sorted(rows, key=lambda r: (r["concurrency"], r["server"]))
        parts += [
            f"<h2>Workload {index}: {_e(title)}</h2>",
            *(
                f'<figure class="plot">{svg}<figcaption class="muted">{_e(t)}</figcaption></figure>'
                for t, svg in plots
            ),
            _table(HEADER, [cells(r, _median) for r in ordered], numeric=True),
            '<p class="muted">medians over runs, times in ms; ± half the range of the runs</p>',
        ]
    none = f'<p class="muted">{_e(no_verdicts or "No verdicts were recorded.")}</p>'
    shown = [_verdict_html(v) for v in verdicts] or [none]
    parts += ["<h2>Verdicts</h2>", *shown, "</body></html>"]
    return "\n".join(parts) + "\n"
