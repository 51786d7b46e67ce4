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

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.measure.metrics import percentile

__all__ = ["PARTS", "breakdown_summary", "split_ttft", "summary_line"]

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
    return replace(split, server_other=server - queue - prefill, transport=ttft - server)


def breakdown_summary(runs: Sequence[Any]) -> dict[str, Any] | None:
    """Medians over runs (measurements) of each part's p50 and p99 (seconds), or None.

    None when no run could be split (the server reported no timings). ``requests`` counts the
    split runs' completed requests with a TTFT, ``split`` those the server gave timings for.
    """
    requests = 0
    splits: list[list[TtftSplit]] = []
    for run in runs:
        with_ttft = [r for r in run.records if r.ok and r.ttft is not None]
        if split := [s for s in map(split_ttft, with_ttft) if s is not None]:
            requests += len(with_ttft)
            splits.append(split)
    if not splits:
        return None
    summary: dict[str, Any] = {"runs": len(splits), "of_runs": len(runs)}
    for name in ("ttft", *PARTS):
        per_run = [[getattr(s, name) for s in split] for split in splits]
        if all(None not in values for values in per_run):
            summary[name] = {
                f"p{q}": statistics.median(percentile(values, q) for values in per_run)
                for q in (50, 99)
            }
    return summary | {"split": sum(map(len, splits)), "requests": requests}


def summary_line(summary: Mapping[str, Any]) -> str:
    """Return the p50 line of :func:`breakdown_summary`, e.g. for a verdict's evidence."""
    p50 = {
        name: f"{summary[name]['p50'] * 1000:.1f}" for name in ("ttft", *PARTS) if name in summary
    }
    parts = " + ".join(f"{name} {p50[name]}" for name in ("queue", "prefill", "rest"))
    text = f"TTFT p50 {p50['ttft']} ms = {parts} ms"
    if "transport" in p50 and "server_other" in p50:
        text += f" (rest = server {p50['server_other']} + transport/client {p50['transport']})"
    return text + f"; medians over {summary['runs']} runs"
