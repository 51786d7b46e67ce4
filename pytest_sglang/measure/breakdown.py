"""Where a request's time to first token went: queueing, prefill, and the rest (pure, no I/O).

From the server's ``meta_info`` timings (``RequestRecord.server_times``, with
``--enable-metrics``): **queue** = ``queue_time``; **prefill** = ``prefill_finished_time -
forward_entry_time``; **rest** = ``ttft - queue - prefill`` (tokenizing, detokenizing, network,
client), so the parts add up to the TTFT. With ``request_received_ts`` and
``response_sent_to_client_ts``, rest splits into **server_other** and **transport** (network
and client): a transport share that grows with load points at the client. Percentiles of parts
do not add up, so :func:`summary_line` shows the TTFT's own beside them.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.metrics import Distribution

__all__ = ["PARTS", "breakdown_summary", "split_ttft", "summary_line", "ttft_breakdown"]

#: The parts of a split, in order; ``server_other`` and ``transport`` only with the server's
#: receive and send timestamps.
PARTS = ("queue", "prefill", "rest", "server_other", "transport")


@dataclass(frozen=True)
class TtftSplit:
    """One request's TTFT and its parts, in seconds."""

    ttft: float
    queue: float
    prefill: float
    rest: float
    server_other: float | None = None
    transport: float | None = None


def split_ttft(record: RequestRecord) -> TtftSplit | None:
    """Split ``record``'s TTFT, or ``None`` without a TTFT or the server's timings."""
    ttft, times = record.ttft, record.server_times or {}
    needed = {"queue_time", "prefill_finished_time", "forward_entry_time"}
    if ttft is None or record.error is not None or not needed <= times.keys():
        return None
    queue = times["queue_time"]
    prefill = times["prefill_finished_time"] - times["forward_entry_time"]
    split = TtftSplit(ttft, queue, prefill, ttft - queue - prefill)
    received, sent = times.get("request_received_ts"), times.get("response_sent_to_client_ts")
    if received is None or sent is None:
        return split
    server = sent - received
    return dataclasses.replace(
        split, server_other=server - queue - prefill, transport=ttft - server
    )


@dataclass(frozen=True)
class TtftBreakdown:
    """One run's TTFT split over its requests: a distribution per part."""

    requests: int  # records with a TTFT
    split: int  # of which the server reported the timings
    ttft: Distribution
    queue: Distribution
    prefill: Distribution
    rest: Distribution
    server_other: Distribution | None = None
    transport: Distribution | None = None
    #: Per request: ``|queue + prefill + rest - ttft|``, the median (0 by construction).
    residual_p50: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON: counts, and each part's distribution (seconds)."""
        return dataclasses.asdict(self)


def ttft_breakdown(records: Iterable[RequestRecord]) -> TtftBreakdown | None:
    """Split a run's (measured) records' TTFT; ``None`` when no request can be split."""
    with_ttft = [r for r in records if r.ok and r.ttft is not None]
    splits = [s for s in map(split_ttft, with_ttft) if s is not None]
    if not splits:
        return None
    parts: dict[str, Any] = {}
    for name in ("ttft", *PARTS):
        values = [v for s in splits if (v := getattr(s, name)) is not None]
        parts[name] = Distribution.of(values) if len(values) == len(splits) else None
    residuals = (abs(s.queue + s.prefill + s.rest - s.ttft) for s in splits)
    return TtftBreakdown(
        len(with_ttft), len(splits), residual_p50=statistics.median(residuals), **parts
    )


def breakdown_summary(runs: Sequence[Any]) -> dict[str, Any] | None:
    """Medians over runs (measurements) of each part's p50 and p99 (seconds), or None.

    None when no run could be split (the server reported no timings).
    """
    breakdowns = [b for b in (ttft_breakdown(r.records) for r in runs) if b]
    if not breakdowns:
        return None
    summary: dict[str, Any] = {"runs": len(breakdowns), "of_runs": len(runs)}
    for name in ("ttft", *PARTS):
        dists: list[Distribution] = [d for b in breakdowns if (d := getattr(b, name))]
        if len(dists) == len(breakdowns):
            summary[name] = {
                "p50": statistics.median(d.p50 for d in dists),
                "p99": statistics.median(d.p99 for d in dists),
            }
    summary["split"] = sum(b.split for b in breakdowns)
    summary["requests"] = sum(b.requests for b in breakdowns)
    return summary


def summary_line(summary: Mapping[str, Any], stat: str = "p50") -> str:
    """One line of :func:`breakdown_summary`, e.g. for a verdict's evidence table."""
    ttft = summary["ttft"][stat]
    parts = " + ".join(f"{n} {summary[n][stat] * 1000:.1f}" for n in ("queue", "prefill", "rest"))
    text = f"TTFT {stat} {ttft * 1000:.1f} ms = {parts} ms"
    if "transport" in summary and "server_other" in summary:
        text += (
            f" (rest = server {summary['server_other'][stat] * 1000:.1f} + transport/client "
            f"{summary['transport'][stat] * 1000:.1f})"
        )
    return text + f"; medians over {summary['runs']} runs"
