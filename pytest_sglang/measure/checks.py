"""Validity checks of one run, reported rather than raised (pure, no I/O).

Each check, its floor and what a failure means: ``docs/metrics.md``, "Validity checks".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop

__all__ = ["CHECK_NAMES", "LOAD_CHECKS", "Check", "failure_kinds", "run_checks"]

#: Every check a run can carry (``sglang_bench(..., allow_checks=[...])`` names them).
CHECK_NAMES = (
    "no_failed_requests", "tokens_counted", "output_length", "token_counts", "input_length",
    "concurrency", "schedule", "chunk_token_counts", "client_bound", "connection_retries",
    "gpu_throttled", "gpu_foreign_process", "gpu_errors",
)  # fmt: skip
#: Checks of the load the client applied: a failure makes the run invalid but does not fail
#: the measurement by itself.
LOAD_CHECKS = frozenset({"concurrency", "schedule", "client_bound"})

#: Slack below the concurrency floor for the client's own gaps between requests.
CONCURRENCY_SLACK = 0.05
#: Open loop: allowed send lag, fixed part (seconds) and fraction of the mean arrival gap.
SCHEDULE_LAG_FIXED = 0.05
SCHEDULE_LAG_FRACTION = 0.1
#: The client is saturated when its process uses this much of a core (asyncio runs on one).
CLIENT_CPU_LIMIT = 0.9
#: Loop lag above a quarter of the median chunk gap (and 2 ms) is reported, not judged: only a
#: saturated core says the client could not keep up (``docs/metrics.md``, "Client saturation").
CLIENT_LAG_SHARE = 0.25
CLIENT_LAG_FLOOR = 0.002
#: How many kinds of failure a check or a failure message lists, and how many characters of
#: each kind's example a message quotes.
ERROR_KINDS = 5
EXAMPLE_CHARS = 300


@dataclass(frozen=True)
class Check:
    """One validity check: ``passed`` is ``True``, ``False`` or ``None`` (not judged)."""

    name: str
    passed: bool | None
    detail: str


def _by_kind(records: Sequence[RequestRecord]) -> tuple[list[tuple[str, list[RequestRecord]]], int]:
    """Return the most frequent kinds of the failed ``records`` with theirs, and how many more.

    A failure's kind is its message's head before ``": "`` (``HTTP 503``), or the message's
    first 60 characters where that head is longer or quotes.
    """
    kinds: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.error is not None:
            head = r.error.split(": ", 1)[0]
            kind = r.error[:60] if len(head) > 60 or "'" in head else head
            kinds.setdefault(kind, []).append(r)
    ranked = sorted(kinds.items(), key=lambda item: -len(item[1]))
    return ranked[:ERROR_KINDS], len(ranked[ERROR_KINDS:])


def failure_kinds(records: Sequence[RequestRecord]) -> list[str]:
    """Return lines counting the failed ``records`` by kind, quoting one of each."""
    top, others = _by_kind(records)
    lines = ["  failures by kind (the server's answer quoted):"] if top else []
    for kind, failed in top:
        example = (failed[0].error or "").removeprefix(kind + ": ")
        if len(example) > EXAMPLE_CHARS:
            example = example[:EXAMPLE_CHARS] + " …"
        lines.append(f"    {len(failed)} x {kind}: {example}")
    if others:
        lines.append(f"    ... and {others} other kinds")
    return lines


def run_checks(
    run: LoadRun, done: Sequence[RequestRecord], duration: float, realised: float
) -> tuple[Check, ...]:
    """Return the validity checks of ``run``.

    ``done``: its completed measured requests; ``duration``: the window, ``realised``: the
    realised concurrency.
    """
    workload, stream, records = run.workload, run.workload.stream, run.measured
    failed = [r for r in records if not r.ok]
    top, others = _by_kind(failed)
    kinds = [f"{len(rs)} x {kind} (e.g. request {rs[0].index}: {rs[0].error})" for kind, rs in top]
    if others:
        kinds.append(f"{others} other kinds")
    detail = f"{len(failed)} of {len(records)} measured requests failed: {'; '.join(kinds)}"
    if not failed:
        detail = f"all {len(records)} measured requests completed"
    checks = [Check("no_failed_requests", not failed, detail)]

    uncounted = [r for r in done if not r.output_tokens or (stream and not sum(r.chunk_tokens))]
    detail = f"every one of {len(done)} completed requests counted tokens"
    if uncounted:
        first = uncounted[0]
        detail = (
            f"{len(uncounted)} of {len(done)} completed requests counted no generated tokens "
            f"(request {first.index}: server count {first.output_tokens_server}, client count "
            f"{first.output_tokens_client}, {len(first.chunk_tokens)} token chunks): the "
            "response arrived but its tokens could not be counted; the server sent no usage the "
            "client understands (stream_options.include_usage ignored?), so throughput would "
            "read 0"
        )
    checks.append(Check("tokens_counted", not uncounted, detail))

    counted = [r for r in done if r.output_tokens is not None]
    wrong = [r for r in counted if r.output_tokens != r.output_len]
    same = {r.output_len for r in counted} == {workload.output_len}
    asked = f"{workload.output_len} tokens" if same else "number of tokens"
    detail = f"all {len(counted)} completed requests generated the {asked}"
    if not counted:
        detail = "no completed request reported its output length"
    elif wrong:
        sample = ", ".join(
            f"request {r.index}: {r.output_tokens} of {r.output_len}" for r in wrong[:3]
        )
        detail = (
            f"{len(wrong)} of {len(counted)} requests did not generate the requested {asked} "
            f"({sample}); is ignore_eos honoured, does the context length fit input_len + "
            "output_len?"
        )
    checks.append(Check("output_length", not wrong if counted else None, detail))

    checks.append(_token_counts(done))
    checks.append(_input_length(run, done))
    load = run.load
    if isinstance(load, ClosedLoop):
        checks.append(_concurrency(run, load.concurrency, len(failed), realised, duration))
    else:
        lag = max((r.sent - r.scheduled for r in records if r.scheduled is not None), default=None)
        allowed = SCHEDULE_LAG_FIXED + SCHEDULE_LAG_FRACTION / load.rate
        detail = (
            f"largest send delay behind schedule {lag * 1000:.1f} ms (allowed "
            f"{allowed * 1000:.1f} ms at {load.rate:g} requests/s)"
            if lag is not None
            else "no request had a schedule"
        )
        checks.append(Check("schedule", None if lag is None else lag <= allowed, detail))

    inexact = [r for r in done if not r.chunk_tokens_exact]
    detail = "every chunk's token count came from the server"
    if not stream:
        detail = "not streamed: no chunks"
    elif inexact:
        detail = (
            f"{len(inexact)} requests had no per-chunk token counts (the server ignored "
            "stream_options.continuous_usage_stats); their tokens were spread evenly over their "
            "chunks: per-token ITL percentiles are approximate, its mean and ITL per chunk exact"
        )
    checks.append(Check("chunk_token_counts", None if inexact or not stream else True, detail))
    checks.append(_client(run, done))

    retried = sum(1 for r in records if r.retries)
    detail = (
        f"{retried} of {len(records)} measured requests failed on a reused connection before "
        "any response byte (the server had closed it) and were sent again on a fresh one; "
        "counted once each, not as failures"
        if retried
        else "no request needed a fresh connection"
    )
    checks.append(Check("connection_retries", True, detail))
    return tuple(checks)


def _token_counts(done: Sequence[RequestRecord]) -> Check:
    compared = 0
    wrong: list[str] = []
    for r in done:
        server = r.output_tokens_server
        chunks = sum(r.chunk_tokens) if r.chunk_times and r.chunk_tokens_exact else None
        for side, count in (("client", r.output_tokens_client), ("chunks", chunks)):
            if server is not None and count is not None:
                compared += 1
                if count != server:  # one disagreement per request is enough to name it
                    wrong.append(f"request {r.index}: {side} {count}, server {server}")
                    break
    detail = f"client and server counts agree ({compared} compared)"
    if not compared:
        detail = "no request had both a client-side and a server-side count"
    elif wrong:
        detail = f"{len(wrong)} requests' token counts disagree ({'; '.join(wrong[:3])})"
    return Check("token_counts", not wrong if compared else None, detail)


def _input_length(run: LoadRun, done: Sequence[RequestRecord]) -> Check:
    workload = run.workload
    reported = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    if not reported:
        return Check("input_length", None, "the server reported no prompt_tokens")
    mean = sum(reported) / len(reported)
    if workload.dataset is not None or workload.turns is not None:
        estimate = sum(r.input_len for r in done) / len(done)
        detail = (
            f"text prompts ({'dataset' if workload.dataset else 'multi-turn sessions'}): the "
            f"server counted {mean:.1f} prompt tokens on average (estimated {estimate:.1f}); "
            "each record keeps the server's count"
        )
        return Check("input_length", None, detail)
    if workload.endpoint == "chat":
        detail = (
            f"chat: the server saw {mean:.1f} prompt tokens on average for a message of "
            f"~{workload.input_len} words ({mean - workload.input_len:+.1f}: the chat template "
            "and tokenization)"
        )
        return Check("input_length", None, detail)
    wrong = [r for r in done if r.prompt_tokens is not None and r.prompt_tokens != r.input_len]
    if not wrong:
        return Check("input_length", True, "every prompt had the requested tokens on the server")
    sample = ", ".join(f"request {r.index}: {r.prompt_tokens} of {r.input_len}" for r in wrong[:3])
    detail = (
        f"{len(wrong)} of {len(reported)} prompts did not have the requested tokens on the "
        f"server ({sample}; mean {mean:.1f})"
    )
    return Check("input_length", False, detail)


def _concurrency(
    run: LoadRun, concurrency: int, failed: int, realised: float, duration: float
) -> Check:
    """Whether the closed loop held its ``concurrency`` slots full, allowing a ramp-down tail."""
    if duration <= 0:
        return Check("concurrency", None, "the run had no duration")
    records = run.measured
    # A session holds its slot from its first send to its last end (a request is a session
    # of one turn).
    bounds: dict[int, tuple[float, float]] = {}
    for r in records:
        if r.end is not None:
            session = run.workload.session(r.index)[0]
            first, last = bounds.get(session, (r.sent, r.end))
            bounds[session] = (min(first, r.sent), max(last, r.end))
    longest = max((last - first for first, last in bounds.values()), default=0.0)
    unit = "request" if run.workload.turns is None else "session"
    target = min(concurrency, len(bounds))
    floor = target * max(0.0, 1 - longest / duration) * (1 - CONCURRENCY_SLACK)
    detail = (
        f"realised {realised:.2f} for {concurrency} requested; allowed "
        f"[{floor:.2f}, {target}] (ramp-down tail of at most the longest {unit}, "
        f"{longest:.3g} s of {duration:.3g} s)"
    )
    passed: bool | None = floor <= realised <= target * 1.001 + 1e-9
    if realised < floor:
        detail += _shortfall(floor, records)
    if failed and not passed:  # failed requests turn slots over fast: the errors judge them
        passed = None
        detail += (
            f"; not judged: {failed} failed requests turned their slots over faster than "
            "served ones"
        )
    return Check("concurrency", passed, detail)


def _shortfall(floor: float, records: Sequence[RequestRecord]) -> str:
    """Say whose a concurrency below its floor was: the server's (sent late) or the client's."""
    timed = [r for r in records if r.end is not None]
    begin = min((r.started for r in timed), default=0.0)
    window = max((r.end or 0.0 for r in timed), default=0.0) - begin
    if window <= 0:
        return ""
    held = math.fsum((r.end or 0.0) - r.started for r in timed) / window
    before = statistics.median(r.sent - r.started for r in timed)
    if held >= floor:
        return (
            f"; true for the server, not a counting artefact: the client held {held:.2f} "
            f"requests open, but each spent {before * 1000:.1f} ms (median) before its bytes "
            "left, opening a connection (a fresh one per request where the server closes "
            "them after each response) and sending"
        )
    return (
        f"; the client itself held only {held:.2f} requests open: its own gaps between one "
        "response and the next request (a busy or slow client)"
    )


def _client(run: LoadRun, done: Sequence[RequestRecord]) -> Check:
    """Whether the load generator kept up (``docs/metrics.md``, "Client saturation")."""
    load = run.client
    if load is None or load.samples == 0:
        return Check("client_bound", None, "the client's own load was not measured")
    gaps = [gap for r in done for gap, _ in r.gaps]
    gap = statistics.median_high(gaps) if gaps else 0.0
    lag_limit = max(CLIENT_LAG_FLOOR, CLIENT_LAG_SHARE * gap)
    detail = (
        f"client CPU {load.cpu_fraction:.2f} of a core (limit {CLIENT_CPU_LIMIT}), event-loop "
        f"lag p99 {load.lag_p99 * 1000:.1f} ms (limit {lag_limit * 1000:.1f} ms"
        + (f", a quarter of the median chunk gap {gap * 1000:.1f} ms" if gap else "")
        + ")"
    )
    if load.cpu_fraction >= CLIENT_CPU_LIMIT:
        detail += (
            ": the client could not keep up and its figures measure itself; spread the load "
            "over processes (processes=N) or hosts"
        )
        return Check("client_bound", False, detail)
    if load.lag_p99 > lag_limit:
        detail += (
            ": the loop was late with CPU to spare, so other work (another process, "
            "this one's other threads) held it back; the latencies may carry that delay"
        )
        return Check("client_bound", None, detail)
    return Check("client_bound", True, detail)


def telemetry_checks(gpu: dict[str, Any]) -> tuple[Check, ...]:
    """Return the checks of what the GPUs did during a run (its ``gpu_telemetry``)."""
    if gpu["samples"] == 0:
        return (Check("gpu_throttled", None, "no GPU telemetry was read"),)
    foreign = ", ".join(map(str, gpu["foreign_pids"]))
    # Per check: whether it failed, then its detail when it failed and when it passed.
    judged = {
        "gpu_throttled": (
            gpu["throttled_fraction"] > 0,
            f"GPUs throttled in {gpu['throttled_fraction']:.0%} of the samples "
            f"({', '.join(gpu['throttle_reasons'])}): the server ran below its clocks, so its "
            "figures are not its capacity",
            "no GPU throttled",
        ),
        "gpu_foreign_process": (
            bool(foreign),
            f"processes {foreign} appeared on the server's GPUs during the run and shared them",
            "no other process appeared on the server's GPUs",
        ),
        "gpu_errors": (
            gpu["new_xid_errors"] + gpu["new_ecc_errors"] > 0,
            f"{gpu['new_xid_errors']} XID and {gpu['new_ecc_errors']} ECC errors during the run",
            "no new XID or ECC errors",
        ),
    }
    return tuple(
        Check(name, not bad, why if bad else ok) for name, (bad, why, ok) in judged.items()
    )
