"""From request records to metrics: one :class:`Measurement` per run (pure, no I/O).

A measurement covers the measured requests of one :class:`~pytest_sglang.loadgen.LoadRun`
(warm-up excluded) with the metric vocabulary of :mod:`pytest_sglang.metrics`. It also
carries validity checks, reported rather than raised, so the verdict layer can call a
measurement invalid instead of calling a server slow:

``no_failed_requests``
    every measured request completed.
``output_length``
    every completed request generated exactly ``workload.output_len`` tokens (ignore_eos
    honoured; a shorter output would make throughputs incomparable).
``token_counts``
    the client's own count equals the server's, and the per-chunk counts add up to it.
``input_length``
    the server's ``prompt_tokens`` equals ``workload.input_len`` (on ``chat`` the template
    adds tokens: reported, not judged).
``concurrency`` (closed loop)
    the client kept ``concurrency`` requests in flight. Over the window the realised
    concurrency can fall short of C only in the ramp-down tail, after the last request was
    sent, which lasts at most the longest request: the floor is
    ``C * (1 - max e2e / window)``, less 5 % for the client's own gaps between one
    response and the next request.
``schedule`` (open loop)
    requests left on time: the largest delay between scheduled and actual send is at most
    50 ms plus 10 % of the mean gap between arrivals (a capped or overloaded client lags).
``chunk_token_counts``
    whether every chunk's token count came from the server; ``None`` (not judged) where
    some were spread evenly (the per-token ITL percentiles are then approximate).

A check's ``passed`` is ``True``, ``False``, or ``None`` when it could not be judged.

Percentiles use linear interpolation between closest ranks (numpy's default); the helper is
private here, numpy-free.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.metrics import metric_spec
from pytest_sglang.stats import percentile
from pytest_sglang.workload import Workload

__all__ = ["Check", "Distribution", "Measurement", "measure"]

#: How many distinct error messages a measurement keeps as samples.
ERROR_SAMPLES = 5
#: Slack below the concurrency floor for the client's own gaps between requests.
CONCURRENCY_SLACK = 0.05
#: Open loop: allowed send lag, fixed part (seconds) and fraction of the mean arrival gap.
SCHEDULE_LAG_FIXED = 0.05
SCHEDULE_LAG_FRACTION = 0.1


@dataclass(frozen=True)
class Distribution:
    """Summary of a latency distribution, in seconds."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        """Summarise ``values``; ``None`` when there are none."""
        if not values:
            return None
        ordered = sorted(values)
        return cls(
            count=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p50=percentile(ordered, 50),
            p90=percentile(ordered, 90),
            p99=percentile(ordered, 99),
            min=ordered[0],
            max=ordered[-1],
        )

    @classmethod
    def weighted(cls, values: Sequence[float], weights: Sequence[int]) -> Distribution | None:
        """Summarise ``values`` where value ``i`` occurs ``weights[i]`` times.

        Identical to :meth:`of` on the expanded list, without building it (per-token ITL has
        one value per generated token).
        """
        pairs = sorted((v, w) for v, w in zip(values, weights, strict=True) if w > 0)
        if not pairs:
            return None
        cumulative: list[int] = []
        total = 0
        for _, weight in pairs:
            total += weight
            cumulative.append(total)

        def at(rank: int) -> float:
            return pairs[bisect.bisect_right(cumulative, rank)][0]

        def percentile(q: float) -> float:
            position = (total - 1) * q / 100
            low = math.floor(position)
            high = min(low + 1, total - 1)
            return at(low) + (at(high) - at(low)) * (position - low)

        return cls(
            count=total,
            mean=math.fsum(v * w for v, w in pairs) / total,
            p50=percentile(50),
            p90=percentile(90),
            p99=percentile(99),
            min=pairs[0][0],
            max=pairs[-1][0],
        )

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types."""
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.p50,
            "p90": self.p90,
            "p99": self.p99,
            "min": self.min,
            "max": self.max,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Distribution:
        """Rebuild from :meth:`as_dict` output."""
        return cls(**dict(data))


@dataclass(frozen=True)
class Check:
    """One validity check: ``passed`` is ``True``, ``False`` or ``None`` (not judged)."""

    name: str
    passed: bool | None
    detail: str

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types."""
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass(frozen=True)
class Measurement:
    """The metrics of one run's measured requests, its validity checks and its records.

    Scalars and distributions are named as in :data:`pytest_sglang.metrics.METRICS`;
    :meth:`get` returns any of them by name (``"output_throughput"``, ``"ttft.p99"``).
    ``records`` are the measured requests' records, ``warmup_records`` the warm-up's.
    """

    workload: Workload
    mode: str
    concurrency: int | None
    rate: float | None
    arrival: str | None
    max_concurrency: int | None
    repeat: int
    requests: int
    completed: int
    failed: int
    duration: float
    input_tokens: int
    output_tokens: int
    output_throughput: float
    total_throughput: float
    request_throughput: float
    ttft: Distribution | None
    itl: Distribution | None
    itl_chunk: Distribution | None
    tpot: Distribution | None
    e2e_latency: Distribution | None
    acceptance_length: float | None
    realised_concurrency: float
    errors: tuple[tuple[str, int], ...]
    checks: tuple[Check, ...]
    records: tuple[RequestRecord, ...] = field(default=(), repr=False, compare=False)
    warmup_records: tuple[RequestRecord, ...] = field(default=(), repr=False, compare=False)

    @classmethod
    def from_run(cls, run: LoadRun) -> Measurement:
        """Compute the measurement of ``run`` (its measured records; warm-up excluded)."""
        return measure(run)

    @property
    def valid(self) -> bool:
        """Whether no validity check failed (checks that could not be judged do not count)."""
        return all(check.passed is not False for check in self.checks)

    def check(self, name: str) -> Check:
        """Return the check called ``name``."""
        for check in self.checks:
            if check.name == name:
                return check
        raise KeyError(f"no check {name!r}; have {', '.join(c.name for c in self.checks)}")

    def get(self, name: str) -> float | None:
        """Return a metric by name: a scalar, or a distribution's statistic (``"ttft.p99"``).

        A bare distribution name means its mean. ``None`` when the run could not measure it
        (no streamed request completed, no speculative decoding...).
        """
        metric_spec(name)
        base, _, stat = name.partition(".")
        value = getattr(self, base)
        if isinstance(value, Distribution):
            return float(getattr(value, stat or "mean"))
        return None if value is None else float(value)

    def as_dict(self, *, include_records: bool = False) -> dict[str, Any]:
        """Return plain JSON types.

        ``include_records`` adds every record, with times relative to the first measured
        request's send.
        """
        data: dict[str, Any] = {
            "workload": self.workload.as_dict(),
            **{name: getattr(self, name) for name in _SCALAR_FIELDS},
            "errors": [{"message": m, "count": n} for m, n in self.errors],
            "checks": [c.as_dict() for c in self.checks],
            "valid": self.valid,
        }
        for name in _DISTRIBUTIONS:
            value = getattr(self, name)
            data[name] = None if value is None else value.as_dict()
        if include_records:
            origin = min((r.sent for r in self.records), default=0.0)
            data["records"] = [r.as_dict(origin) for r in self.records]
            data["warmup_records"] = [r.as_dict(origin) for r in self.warmup_records]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        """Rebuild a measurement from :meth:`as_dict` output (records when it has them)."""
        values = {k: data[k] for k in _SCALAR_FIELDS}
        for name in _DISTRIBUTIONS:
            raw = data.get(name)
            values[name] = None if raw is None else Distribution.from_dict(raw)
        return cls(
            workload=Workload.from_dict(data["workload"]),
            errors=tuple((e["message"], e["count"]) for e in data.get("errors", [])),
            checks=tuple(Check(**c) for c in data.get("checks", [])),
            records=tuple(RequestRecord.from_dict(r) for r in data.get("records", [])),
            warmup_records=tuple(
                RequestRecord.from_dict(r) for r in data.get("warmup_records", [])
            ),
            **values,
        )


_DISTRIBUTIONS = ("ttft", "itl", "itl_chunk", "tpot", "e2e_latency")
_SCALAR_FIELDS = (
    "mode",
    "concurrency",
    "rate",
    "arrival",
    "max_concurrency",
    "repeat",
    "requests",
    "completed",
    "failed",
    "duration",
    "input_tokens",
    "output_tokens",
    "output_throughput",
    "total_throughput",
    "request_throughput",
    "acceptance_length",
    "realised_concurrency",
)


def measure(run: LoadRun) -> Measurement:
    """Compute the :class:`Measurement` of ``run``'s measured requests."""
    workload = run.workload
    records = run.measured
    done = [r for r in records if r.ok]
    failed = len(records) - len(done)

    sends = [r.sent for r in records]
    ends = [r.end for r in records if r.end is not None]
    start = min(sends, default=0.0)
    duration = max(max(ends, default=start) - start, 0.0)

    output_tokens = sum(r.output_tokens or 0 for r in done)
    input_tokens = sum(
        r.prompt_tokens if r.prompt_tokens is not None else r.input_len for r in done
    )
    e2es = [r.end - r.sent for r in records if r.end is not None]
    realised = math.fsum(e2es) / duration if duration > 0 else 0.0

    gaps: list[float] = []
    per_token: list[float] = []
    weights: list[int] = []
    for record in done:
        times, tokens = record.chunk_times, record.chunk_tokens
        for i in range(1, len(times)):
            gap = times[i] - times[i - 1]
            gaps.append(gap)
            per_token.append(gap / tokens[i])
            weights.append(tokens[i])

    return Measurement(
        workload=workload,
        mode=run.mode,
        concurrency=run.concurrency,
        rate=run.rate,
        arrival=run.arrival,
        max_concurrency=run.max_concurrency,
        repeat=run.repeat,
        requests=len(records),
        completed=len(done),
        failed=failed,
        duration=duration,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        output_throughput=_rate(output_tokens, duration),
        total_throughput=_rate(input_tokens + output_tokens, duration),
        request_throughput=_rate(len(done), duration),
        ttft=Distribution.of([t for r in done if (t := r.ttft) is not None]),
        itl=Distribution.weighted(per_token, weights),
        itl_chunk=Distribution.of(gaps),
        tpot=Distribution.of([t for r in done if (t := r.tpot) is not None]),
        e2e_latency=Distribution.of([t for r in done if (t := r.e2e) is not None]),
        acceptance_length=_acceptance_length(done),
        realised_concurrency=realised,
        errors=tuple(Counter(r.error for r in records if r.error).most_common(ERROR_SAMPLES)),
        checks=_checks(run, records, done, duration, realised, max(e2es, default=0.0)),
        records=records,
        warmup_records=run.warmup_records,
    )


def _rate(amount: float, duration: float) -> float:
    return amount / duration if duration > 0 else 0.0


def _acceptance_length(done: Sequence[RequestRecord]) -> float | None:
    # Requests without verify forwards (no speculation, or 0.5.5's spec_verify_ct 0) carry
    # no information about acceptance and are left out of both sums.
    spec = [r for r in done if r.spec_verify_ct and r.output_tokens_server is not None]
    if not spec:
        return None
    verify = sum(r.spec_verify_ct or 0 for r in spec)
    return sum(r.output_tokens_server or 0 for r in spec) / verify


def _checks(
    run: LoadRun,
    records: Sequence[RequestRecord],
    done: Sequence[RequestRecord],
    duration: float,
    realised: float,
    longest: float,
) -> tuple[Check, ...]:
    checks = [
        _check_failures(records),
        _check_output_length(run.workload, done),
        _check_token_counts(done),
        _check_input_length(run.workload, done),
    ]
    if run.mode == "closed" and run.concurrency is not None:
        checks.append(
            _check_concurrency(run.concurrency, len(records), realised, longest, duration)
        )
    if run.mode == "open" and run.rate:
        checks.append(_check_schedule(run.rate, records))
    checks.append(_check_chunk_counts(done, run.workload.stream))
    return tuple(checks)


def _check_failures(records: Sequence[RequestRecord]) -> Check:
    failed = [r for r in records if not r.ok]
    if not failed:
        return Check("no_failed_requests", True, f"all {len(records)} measured requests completed")
    first = failed[0]
    return Check(
        "no_failed_requests",
        False,
        f"{len(failed)} of {len(records)} measured requests failed; "
        f"first (request {first.index}): {first.error}",
    )


def _check_output_length(workload: Workload, done: Sequence[RequestRecord]) -> Check:
    counted = [r for r in done if r.output_tokens is not None]
    if not counted:
        return Check("output_length", None, "no completed request reported its output length")
    wrong = [r for r in counted if r.output_tokens != workload.output_len]
    if not wrong:
        return Check(
            "output_length",
            True,
            f"all {len(counted)} completed requests generated {workload.output_len} tokens",
        )
    sample = ", ".join(f"request {r.index}: {r.output_tokens}" for r in wrong[:3])
    return Check(
        "output_length",
        False,
        f"{len(wrong)} of {len(counted)} requests did not generate the requested "
        f"{workload.output_len} tokens ({sample}); is ignore_eos honoured, does the context "
        f"length fit input_len + output_len?",
    )


def _check_token_counts(done: Sequence[RequestRecord]) -> Check:
    compared = 0
    wrong: list[str] = []
    for r in done:
        server = r.output_tokens_server
        if server is None:
            continue
        if r.output_tokens_client is not None:
            compared += 1
            if r.output_tokens_client != server:
                wrong.append(f"request {r.index}: client {r.output_tokens_client}, server {server}")
                continue
        if r.chunk_times and r.chunk_tokens_exact:
            compared += 1
            if sum(r.chunk_tokens) != server:
                wrong.append(f"request {r.index}: chunks {sum(r.chunk_tokens)}, server {server}")
    if compared == 0:
        return Check(
            "token_counts", None, "no request had both a client-side and a server-side count"
        )
    if wrong:
        return Check(
            "token_counts",
            False,
            f"{len(wrong)} requests' token counts disagree ({'; '.join(wrong[:3])})",
        )
    return Check("token_counts", True, f"client and server counts agree ({compared} compared)")


def _check_input_length(workload: Workload, done: Sequence[RequestRecord]) -> Check:
    reported = [r.prompt_tokens for r in done if r.prompt_tokens is not None]
    if not reported:
        return Check("input_length", None, "the server reported no prompt_tokens")
    mean = sum(reported) / len(reported)
    if workload.endpoint == "chat":
        return Check(
            "input_length",
            None,
            f"chat: the server saw {mean:.1f} prompt tokens on average for a message of "
            f"~{workload.input_len} words ({mean - workload.input_len:+.1f}: the chat template "
            f"and tokenization)",
        )
    wrong = [n for n in reported if n != workload.input_len]
    if not wrong:
        return Check(
            "input_length", True, f"every prompt was {workload.input_len} tokens on the server"
        )
    return Check(
        "input_length",
        False,
        f"{len(wrong)} of {len(reported)} prompts were not {workload.input_len} tokens on the "
        f"server (mean {mean:.1f})",
    )


def _check_concurrency(
    concurrency: int, requests: int, realised: float, longest: float, duration: float
) -> Check:
    if duration <= 0:
        return Check("concurrency", None, "the run had no duration")
    # Fewer requests than slots can never fill them all.
    target = min(concurrency, requests)
    floor = target * max(0.0, 1 - longest / duration) * (1 - CONCURRENCY_SLACK)
    ceiling = target * 1.001 + 1e-9
    detail = (
        f"realised {realised:.2f} for {concurrency} requested; allowed "
        f"[{floor:.2f}, {target}] (ramp-down tail of at most the longest request, "
        f"{longest:.3g} s of {duration:.3g} s)"
    )
    return Check("concurrency", floor <= realised <= ceiling, detail)


def _check_schedule(rate: float, records: Sequence[RequestRecord]) -> Check:
    lags = [r.sent - r.scheduled for r in records if r.scheduled is not None]
    if not lags:
        return Check("schedule", None, "no request had a schedule")
    allowed = SCHEDULE_LAG_FIXED + SCHEDULE_LAG_FRACTION / rate
    worst = max(lags)
    return Check(
        "schedule",
        worst <= allowed,
        f"largest send delay behind schedule {worst * 1000:.1f} ms (allowed "
        f"{allowed * 1000:.1f} ms at {rate:g} requests/s)",
    )


def _check_chunk_counts(done: Sequence[RequestRecord], stream: bool) -> Check:
    if not stream:
        return Check("chunk_token_counts", None, "not streamed: no chunks")
    inexact = [r for r in done if not r.chunk_tokens_exact]
    if not inexact:
        return Check("chunk_token_counts", True, "every chunk's token count came from the server")
    return Check(
        "chunk_token_counts",
        None,
        f"{len(inexact)} requests had no per-chunk token counts (the server ignored "
        f"stream_options.continuous_usage_stats); their tokens were spread evenly over their "
        f"chunks: per-token ITL percentiles are approximate, its mean and ITL per chunk exact",
    )
