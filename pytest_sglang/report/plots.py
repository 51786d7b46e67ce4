"""The qualification report's plots: matplotlib figures rendered to inline SVG.

matplotlib (the ``report`` extra) draws; text stays ``<text>`` and the hash salt is fixed,
so the same data gives the same bytes. Medians with min-max bars against concurrency;
stored baselines dashed in their server's colour.
"""

from __future__ import annotations

import io
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
        label = str(row["server"])
        if baseline:
            label = f"{label} (baseline {row.get('session', 'stored')})"
        series = out.setdefault(label, Series(label, baseline))
        level = series.points.setdefault(int(row["concurrency"]), {})
        for metric in METRICS:
            values = [v for v in run_values(row["runs"], metric) if v > 0]
            level.setdefault(metric, []).extend(values)
    return list(out.values())


def _stats(values: Sequence[float], scale: float) -> tuple[float, float, float] | None:
    if not values:
        return None
    return (
        statistics.median(values) * scale,
        min(values) * scale,
        max(values) * scale,
    )


#: Line styles of stored baselines: the first session of a server dashed, then dotted...
_BASELINE_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1, 1, 1)))


def _server(label: str) -> str:
    return label.split(" (baseline ")[0]


#: matplotlib's tab10 colours without its red, which marks regressions and crossovers.
_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
    "#bcbd22",
    "#7f7f7f",
)


def series_styles(series: Sequence[Series]) -> list[tuple[str, Any]]:
    """Return each series' (colour, line style): no two series look alike.

    A measured server gets the next colour and a solid line; a stored baseline the colour
    of its server (the next free one if the server was not measured) and the next dashed
    style among that server's baselines.
    """
    colours = _COLOURS
    by_server: dict[str, str] = {}
    for s in series:
        if not s.baseline:
            by_server.setdefault(s.label, colours[len(by_server) % len(colours)])
    for s in series:
        if s.baseline:
            by_server.setdefault(_server(s.label), colours[len(by_server) % len(colours)])
    used: dict[str, int] = {}
    out: list[tuple[str, Any]] = []
    for s in series:
        colour = by_server[_server(s.label) if s.baseline else s.label]
        if not s.baseline:
            out.append((colour, "-"))
            continue
        index = used.get(colour, 0)
        used[colour] = index + 1
        out.append((colour, _BASELINE_STYLES[index % len(_BASELINE_STYLES)]))
    return out


PANELS = (
    ("output_throughput", "output throughput (tok/s)", 1.0),
    ("ttft", "TTFT p50 and p99 (ms)", 1000.0),
    ("itl.p50", "ITL p50 (ms)", 1000.0),
)


def render_workload_plots(
    series: Sequence[Series],
    *,
    title: str,
    crossovers: Sequence[tuple[str, int]] = (),
    regressions: Sequence[tuple[str, int]] = (),
) -> list[tuple[str, str]]:
    """Return the workload's plots as ``(caption, svg)`` pairs."""
    import matplotlib

    matplotlib.use("svg", force=False)
    from matplotlib import pyplot as plt
    from matplotlib.figure import Figure

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "pytest-sglang", "font.size": 9})
    styles = series_styles(series)
    plots: list[tuple[str, str]] = []

    def svg(figure: Figure) -> str:
        buffer = io.StringIO()
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
        plt.close(figure)
        text = buffer.getvalue()
        return text[text.index("<svg") :]

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for s, (colour, style) in zip(series, styles, strict=True):
        levels = sorted(s.points)
        for ax, (metric, ylabel, scale) in zip(axes, PANELS, strict=True):
            metrics = ["ttft.p50", "ttft.p99"] if metric == "ttft" else [metric]
            for m in metrics:
                pts = [(c, st) for c in levels if (st := _stats(s.points[c].get(m, []), scale))]
                if not pts:
                    continue
                xs = [c for c, _ in pts]
                med = [st[0] for _, st in pts]
                err = [[st[0] - st[1] for _, st in pts], [st[2] - st[0] for _, st in pts]]
                marker = "s" if m.endswith("p99") else "o"
                name = s.label + (f" {m.split('.')[1]}" if metric == "ttft" else "")
                ax.errorbar(
                    xs,
                    med,
                    yerr=err,
                    linestyle=style,
                    marker=marker,
                    color=colour,
                    capsize=3,
                    markersize=4,
                    label=name,
                    linewidth=1.3,
                )
                if metric == "output_throughput" and not s.baseline:
                    hit = {c for name, c in regressions if name == s.label}
                    bad = [(c, v) for c, v in zip(xs, med, strict=True) if c in hit]
                    if bad:
                        ax.scatter(
                            [c for c, _ in bad],
                            [v for _, v in bad],
                            s=160,
                            facecolors="none",
                            edgecolors="#d62728",
                            linewidths=2,
                            label="regression",
                            zorder=5,
                        )
            ax.set_ylabel(ylabel)
    for ax, (metric, _, _) in zip(axes, PANELS, strict=True):
        ax.set_xlabel("concurrency")
        ax.set_xscale("symlog", linthresh=1)
        ax.grid(True, alpha=0.3)
        for name, level in crossovers:
            ax.axvline(
                level,
                color="#d62728",
                linestyle=":",
                linewidth=1.2,
                label=f"crossover {name} C={level}" if metric == "output_throughput" else None,
            )
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    figure.suptitle(title, fontsize=10)
    plots.append(
        (
            "Throughput, TTFT and ITL against concurrency (median over runs, bars: "
            "slowest to fastest run; dashed or dotted: a stored baseline, in its server's "
            "colour)",
            svg(figure),
        )
    )

    figure, ax = plt.subplots(figsize=(6, 4))
    drawn = False
    for s, (colour, style) in zip(series, styles, strict=True):
        pareto: list[tuple[float, float, int]] = []
        for c in sorted(s.points):
            tpot = s.points[c].get("tpot.p50") or s.points[c].get("itl.p50") or []
            thr = s.points[c].get("output_throughput", [])
            if tpot and thr:
                pareto.append((statistics.median(tpot) * 1000, statistics.median(thr), c))
        if not pareto:
            continue
        drawn = True
        ax.plot(
            [p[0] for p in pareto],
            [p[1] for p in pareto],
            linestyle=style,
            marker="o",
            color=colour,
            label=s.label,
            markersize=4,
        )
        for x, y, c in pareto:
            ax.annotate(
                f"C={c}",
                (x, y),
                textcoords="offset points",
                xytext=(4, 3),
                fontsize=7,
                color=colour,
            )
    ax.set_xlabel("TPOT p50 per user (ms/token)")
    ax.set_ylabel("output throughput (tok/s)")
    ax.grid(True, alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    ax.set_title(f"{title}: throughput against latency", fontsize=10)
    plots.append(
        (
            "Throughput against per-user latency (the Pareto view), one point per concurrency",
            svg(figure),
        )
    )
    return plots
