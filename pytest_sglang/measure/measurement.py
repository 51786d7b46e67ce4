"""From request records to metrics: one :class:`Measurement` per run (pure, no I/O).

It covers a run's measured requests (warm-up excluded) and carries the run's validity checks,
reported rather than raised (``docs/metrics.md``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from pytest_sglang.loadgen.records import LoadRun, RequestRecord
from pytest_sglang.loadgen.schedule import run_fields
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.checks import Check, run_checks
from pytest_sglang.measure.metrics import Distribution, metric_spec

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
    #: What the GPUs did over the measured requests (``TelemetrySampler.summary``), if read.
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
        data: dict[str, Any] = {"workload": self.workload.as_dict()}
        for name in _PLAIN:
            value = getattr(self, name)
            data[name] = asdict(value) if isinstance(value, Distribution) else value
        data["errors"] = [{"message": m, "count": n} for m, n in self.errors]
        data["checks"] = [asdict(c) for c in self.checks]
        data["valid"] = self.valid
        if include_records:
            origin = min((r.sent for r in self.records), default=0.0)
            data["records"] = [r.as_dict(origin) for r in self.records]
            data["warmup_records"] = [r.as_dict(origin) for r in self.warmup_records]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Measurement:
        """Rebuild a measurement from :meth:`as_dict` output (records when it has them).

        Fields with a default were added later and may be missing.
        """
        values: dict[str, Any] = {n: data[n] if n in _REQUIRED else data.get(n) for n in _PLAIN}
        for name in _DISTRIBUTIONS:
            values[name] = values[name] and Distribution(**values[name])
        return cls(
            workload=Workload.from_dict(data["workload"]),
            errors=tuple((e["message"], e["count"]) for e in data.get("errors", [])),
            checks=tuple(Check(**c) for c in data.get("checks", [])),
            records=tuple(RequestRecord.from_dict(r) for r in data.get("records", [])),
            warmup_records=tuple(map(RequestRecord.from_dict, data.get("warmup_records", []))),
            **values,
        )


_DISTRIBUTIONS = ("ttft", "itl", "itl_chunk", "tpot", "e2e_latency")
_OWN = {"workload", "errors", "checks", "records", "warmup_records"}
#: The fields as_dict writes as they are (distributions as dicts).
_PLAIN = tuple(f.name for f in fields(Measurement) if f.name not in _OWN)
_REQUIRED = {f.name for f in fields(Measurement) if f.default is MISSING} - set(_DISTRIBUTIONS)


def measure(run: LoadRun) -> Measurement:
    """Compute the :class:`Measurement` of ``run``'s measured requests."""
    records = run.measured
    done = [r for r in records if r.ok]
    start = min((r.sent for r in records), default=0.0)
    ends = [r.end for r in records if r.end is not None]
    duration = max(max(ends, default=start) - start, 0.0)
    output_tokens = sum(r.output_tokens or 0 for r in done)
    input_tokens = sum(r.input_len if r.prompt_tokens is None else r.prompt_tokens for r in done)
    realised = math.fsum(r.e2e or 0.0 for r in records) / duration if duration > 0 else 0.0
    gaps = [gap for r in done for gap in r.gaps]
    spec = [r for r in done if r.spec_verify_ct and r.output_tokens_server is not None]
    cached = [r for r in done if r.cached_tokens is not None and r.prompt_tokens]

    def rate(amount: float) -> float:
        return amount / duration if duration > 0 else 0.0

    return Measurement(
        workload=run.workload,
        **run_fields(run.load),
        repeat=run.repeat,
        requests=len(records),
        completed=len(done),
        failed=len(records) - len(done),
        duration=duration,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        output_throughput=rate(output_tokens),
        total_throughput=rate(input_tokens + output_tokens),
        request_throughput=rate(len(done)),
        ttft=Distribution.of([t for r in done if (t := r.ttft) is not None]),
        itl=Distribution.weighted([g / n for g, n in gaps], [n for _, n in gaps]),
        itl_chunk=Distribution.of([g for g, _ in gaps]),
        tpot=Distribution.of([t for r in done if (t := r.tpot) is not None]),
        e2e_latency=Distribution.of([t for r in done if (t := r.e2e) is not None]),
        # Requests without verify forwards (no speculation, or 0.5.5's spec_verify_ct 0)
        # carry no information about acceptance and are left out of both sums.
        acceptance_length=sum(r.output_tokens_server or 0 for r in spec)
        / sum(r.spec_verify_ct or 0 for r in spec)
        if spec
        else None,
        realised_concurrency=realised,
        client_cpu_fraction=None if run.client is None else run.client.cpu_fraction,
        loop_lag_p99=None if run.client is None else run.client.lag_p99,
        cache_hit_ratio=sum(r.cached_tokens or 0 for r in cached)
        / sum(r.prompt_tokens or 0 for r in cached)
        if cached
        else None,
        errors=tuple(Counter(r.error for r in records if r.error).most_common(ERROR_SAMPLES)),
        checks=run_checks(run, done, duration, realised),
        records=records,
        warmup_records=run.warmup_records,
    )
