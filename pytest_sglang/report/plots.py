"""The qualification report's plots: matplotlib (the ``report`` extra) figures as inline SVG.

Text stays ``<text>`` and the hash salt is fixed, so the same data gives the same bytes.
"""

from __future__ import annotations

import io
import itertools
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.report.entries import run_values

__all__ = ["Series", "render_workload_plots", "series_of", "series_styles"]


@dataclass
class Series:
    """One server's (or baseline's) points over concurrency: per level, one value per run."""

    label: str
    server: str
    baseline: bool = False
    #: concurrency -> metric -> values per run
    points: dict[int, dict[str, list[float]]] = field(default_factory=dict)


METRICS = ("output_throughput", "ttft.p50", "ttft.p99", "itl.p50", "tpot.p50")


def series_of(rows: Sequence[Mapping[str, Any]], *, baseline: bool = False) -> list[Series]:
    """Group measurement rows (one workload) into series by server (and stored session)."""
    out: dict[str, Series] = {}
    for row in rows:
        if row.get("rate") is not None:
            continue  # an open loop's load is a rate, not a point on the concurrency axis
        server = str(row["server"])
        label = f"{server} (baseline {row.get('session', 'stored')})" if baseline else server
        series = out.setdefault(label, Series(label, server, baseline))
        level = series.points.setdefault(int(row["concurrency"]), {})
        for metric in METRICS:
            level.setdefault(metric, []).extend(v for v in run_values(row["runs"], metric) if v > 0)
    return list(out.values())


#: Line styles of stored baselines: the first session of a server dashed, then dotted...
_BASELINE_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))
#: Marks regressions and crossovers; no series is drawn in it.
_RED = "#d62728"


def series_styles(series: Sequence[Series]) -> list[tuple[str, Any]]:
    """Return each series' (colour, line style): no two series look alike.

    A measured server gets the next colour and a solid line; a stored baseline its server's
    colour (the next free one if the server was not measured) and the next dashed style.
    """
    from matplotlib import colormaps, colors

    tab10 = colormaps["tab10"]
    palette = [c for c in map(colors.to_hex, tab10(range(tab10.N))) if c != _RED]
    colours: dict[str, str] = {}
    for s in sorted(series, key=lambda s: s.baseline):  # measured servers first
        colours.setdefault(s.server, palette[len(colours) % len(palette)])
    dashes = {colour: itertools.cycle(_BASELINE_STYLES) for colour in colours.values()}
    return [(c := colours[s.server], next(dashes[c]) if s.baseline else "-") for s in series]


#: The concurrency panels: their metrics (the first panel's crossovers are named and its
#: regressions ringed), axis label and scale to the axis' unit.
PANELS = (
    (("output_throughput",), "output throughput (tok/s)", 1.0),
    (("ttft.p50", "ttft.p99"), "TTFT p50 and p99 (ms)", 1000.0),
    (("itl.p50",), "ITL p50 (ms)", 1000.0),
)


def _svg(figure: Any) -> str:
    """Grid the figure's axes (a legend where a line is named); return it as ``<svg>``."""
    for ax in figure.axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def render_workload_plots(
    series: Sequence[Series],
    title: str,
    crossovers: Sequence[tuple[str, int]],
    regressions: Sequence[tuple[str, int]],
) -> list[tuple[str, str]]:
    """Return the workload's plots as ``(caption, svg)`` pairs.

    ``crossovers`` (spec/base, level) are drawn as vertical lines, ``regressions`` (server,
    level) as rings round the measured points.
    """
    from matplotlib import rcParams
    from matplotlib.figure import Figure  # not pyplot: no backend or figure registry to touch

    rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "pytest-sglang", "font.size": 9})
    styles = list(zip(series, series_styles(series), strict=True))
    figure = Figure(figsize=(13, 3.6))
    axes = figure.subplots(1, 3)
    for ax, (metrics, ylabel, scale) in zip(axes, PANELS, strict=True):
        ax.set(xlabel="concurrency", ylabel=ylabel)
        ax.set_xscale("symlog", linthresh=1)
        first = ax is axes[0]
        for (s, (colour, style)), m in itertools.product(styles, metrics):
            levels = [c for c in sorted(s.points) if s.points[c].get(m)]
            if not levels:
                continue
            values = [[v * scale for v in s.points[c][m]] for c in levels]
            med = [statistics.median(v) for v in values]
            low = [mid - min(v) for mid, v in zip(med, values, strict=True)]
            high = [max(v) - mid for mid, v in zip(med, values, strict=True)]
            name = s.label + (f" {m.split('.')[1]}" if len(metrics) > 1 else "")
            marker = "s" if m.endswith("p99") else "o"
            line = {"linestyle": style, "color": colour, "label": name, "linewidth": 1.3}
            ax.errorbar(levels, med, [low, high], marker=marker, capsize=3, ms=4, **line)
            bad = [(c, v) for c, v in zip(levels, med, strict=True) if (s.label, c) in regressions]
            if first and bad and not s.baseline:
                ring = {"facecolors": "none", "edgecolors": _RED, "linewidths": 2, "zorder": 5}
                ax.scatter(*zip(*bad, strict=True), s=160, label="regression", **ring)
        for name, level in crossovers:
            label = f"crossover {name} C={level}" if first else None
            ax.axvline(level, color=_RED, linestyle=":", linewidth=1.2, label=label)
    figure.suptitle(title, fontsize=10)
    caption = (
        "Throughput, TTFT and ITL against concurrency (median over runs, bars: slowest to "
        "fastest run; dashed or dotted: a stored baseline, in its server's colour)"
    )
    plots = [(caption, _svg(figure))]
    figure = Figure(figsize=(6, 4))
    ax = figure.subplots()
    for s, (colour, style) in styles:
        pareto = [
            (statistics.median(tpot) * 1000, statistics.median(thr), c)
            for c in sorted(s.points)
            if (tpot := s.points[c].get("tpot.p50") or s.points[c].get("itl.p50"))
            and (thr := s.points[c].get("output_throughput"))
        ]
        if pareto:
            xs, ys, _ = zip(*pareto, strict=True)
            ax.plot(xs, ys, linestyle=style, marker="o", color=colour, label=s.label, markersize=4)
            for x, y, c in pareto:
                ax.annotate(
                    f"C={c}", (x, y), (4, 3), textcoords="offset points", fontsize=7, color=colour
                )
    ax.set(xlabel="TPOT p50 per user (ms/token)", ylabel="output throughput (tok/s)")
    ax.set_title(f"{title}: throughput against latency", fontsize=10)
    caption = "Throughput against per-user latency (the Pareto view), one point per concurrency"
    return [*plots, (caption, _svg(figure))]
