"""From request records to metrics: one :class:`Measurement` per run (pure, no I/O).

It covers a run's measured requests (warm-up excluded) and carries the run's validity checks,
reported rather than raised (``docs/metrics.md``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.checks import Check, run_checks
from pytest_sglang.measure.distribution import Distribution
from pytest_sglang.measure.metrics import metric_spec

__all__ = ["Check", "Distribution", "Measurement", "measure"]

#: How many distinct error messages a measurement keeps as samples.
ERROR_SAMPLES = 5


@dataclass(frozen=True)
class Measurement:
    """The metrics (named as in ``METRICS``), validity checks and records of one run."""

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
    #: The load generator's own CPU (cores) and event-loop lag during the measured requests.
    client_cpu_fraction: float | None = None
    loop_lag_p99: float | None = None
    cache_hit_ratio: float | None = None
    #: ``/metrics`` deltas over the measured requests, when the server serves metrics.
    server_counters: dict[str, Any] | None = None
    #: :class:`~pytest_sglang.gpu.telemetry.RunTelemetry` over the measured requests, if read.
    gpu_telemetry: dict[str, Any] | None = None
    records: tuple[RequestRecord, ...] = field(default=(), repr=False, compare=False)
    warmup_records: tuple[RequestRecord, ...] = field(default=(), repr=False, compare=False)

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
        """Return a metric by name (``"ttft.p99"``, bare ``"ttft"``: mean); None: unmeasured."""
        metric_spec(name)
        base, _, stat = name.partition(".")
        value = getattr(self, base)
        if isinstance(value, Distribution):
            return float(getattr(value, stat or "mean"))
        return None if value is None else float(value)

    def as_dict(self, *, include_records: bool = False) -> dict[str, Any]:
        """Return plain JSON types (``include_records``: times relative to the first send)."""
        data: dict[str, Any] = {
            "workload": self.workload.as_dict(),
            **{name: getattr(self, name) for name in _SCALAR_FIELDS + _OPTIONAL_FIELDS},
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
        values.update({k: data.get(k) for k in _OPTIONAL_FIELDS})
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
_FIELDS = [
    f
    for f in fields(Measurement)
    if f.name not in {"workload", "errors", "checks", "records", "warmup_records", *_DISTRIBUTIONS}
]
#: Every report has these; the fields with a default were added later and may be missing.
_SCALAR_FIELDS = tuple(f.name for f in _FIELDS if f.default is MISSING)
_OPTIONAL_FIELDS = tuple(f.name for f in _FIELDS if f.default is not MISSING)


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
        client_cpu_fraction=None if run.client is None else run.client.cpu_fraction,
        loop_lag_p99=None if run.client is None else run.client.lag_p99,
        cache_hit_ratio=_cache_hit_ratio(done),
        errors=tuple(Counter(r.error for r in records if r.error).most_common(ERROR_SAMPLES)),
        checks=run_checks(run, records, done, duration, realised, max(e2es, default=0.0)),
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


def _cache_hit_ratio(done: Sequence[RequestRecord]) -> float | None:
    reported = [r for r in done if r.cached_tokens is not None and r.prompt_tokens]
    if not reported:
        return None
    return sum(r.cached_tokens or 0 for r in reported) / sum(r.prompt_tokens or 0 for r in reported)
