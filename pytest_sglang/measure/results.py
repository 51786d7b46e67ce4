"""The results of measurements: what ``sglang_bench`` returns and the session cache keeps.

A :class:`BenchResult` holds the runs of one server, workload and concurrency; a
:class:`Sweep`, one result per level.
"""

from __future__ import annotations

import pickle
import statistics
import zlib
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, SupportsIndex, cast, overload

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.schedule import ClosedLoop, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.report.entries import MeasurementBody, Schedule

__all__ = ["CONFIG_KEYS", "PERFORMANCE_FLAGS", "BenchResult", "PackedRecords", "Sweep", "packed"]

#: Server-info keys, besides model and parallelism, that change performance.
PERFORMANCE_FLAGS = (
    "context_length", "max_running_requests", "speculative_algorithm",
    "speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens",
    "attention_backend", "mem_fraction_static",
)  # fmt: skip
#: Server-info keys that decide whether two servers' results are comparable.
CONFIG_KEYS = (
    "model_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    *PERFORMANCE_FLAGS,
    "version",
)


@dataclass(frozen=True)
class BenchResult:
    """The repeated runs of one server under one workload at one concurrency."""

    server: str
    workload: Workload
    concurrency: int
    runs: tuple[Measurement, ...]
    #: The server's effective configuration (``CONFIG_KEYS`` of ``/server_info``).
    config: dict[str, Any] = field(default_factory=dict)
    #: How the runs were scheduled against a compared server: "blocks" or "interleaved".
    schedule: Schedule = "blocks"
    url: str = ""
    #: What cut the measurement short (a test timeout, Ctrl-C); the cut run comes last.
    cut: str | None = None
    #: How many of ``runs`` are whole when the measurement was cut.
    finished_runs: int | None = None
    #: An open loop's load; ``None`` for a closed loop (an open loop's ``concurrency`` is its
    #: cap, or 0).
    open_loop: OpenLoop | None = None
    #: The checks that did not apply to the server, and why (``SGLangServer.not_applicable``).
    not_applicable: dict[str, str] = field(default_factory=dict)

    def values(self, metric: str) -> list[float]:
        """Return ``metric`` of every run (runs where it is unmeasurable are left out)."""
        metric_spec(metric)
        return [v for v in (run.get(metric) for run in self.runs) if v is not None]

    def median(self, metric: str) -> float | None:
        """Return the median over runs of ``metric``, or None when no run measured it."""
        values = self.values(metric)
        return statistics.median(values) if values else None

    @property
    def valid(self) -> bool:
        """Whether every run passed its validity checks."""
        return all(run.valid for run in self.runs)

    def problems(self) -> list[str]:
        """Return one line per failed validity check, naming the run."""
        return [
            f"run {index + 1}: {check.name}: {check.detail}"
            for index, run in enumerate(self.runs)
            for check in run.checks
            if check.passed is False
        ]

    @property
    def errors(self) -> int:
        """Failed requests over all runs."""
        return sum(run.failed for run in self.runs)

    def label(self) -> str:
        """Return e.g. ``eagle3 @ C=10`` (``eagle3 @ 20 req/s poisson`` in an open loop)."""
        load = self.open_loop or ClosedLoop(self.concurrency)
        return f"{self.server} @ {load.describe()}"

    def as_dict(self) -> MeasurementBody:
        """Return plain JSON types, for reports."""
        body: MeasurementBody = {
            "server": self.server,
            "url": self.url,
            "workload": self.workload.as_dict(),
            "concurrency": self.concurrency,
            "schedule": self.schedule,
            "config": dict(self.config),
            "runs": [run.as_dict() for run in self.runs],
        }
        if self.cut is not None:
            body["cut"] = self.cut
        if self.finished_runs is not None:
            body["finished_runs"] = self.finished_runs
        if self.not_applicable:
            body["kind"] = "openai"
            body["not_applicable"] = dict(self.not_applicable)
        if self.open_loop is not None:
            body["rate"] = self.open_loop.rate
            body["arrival"] = self.open_loop.arrival
            body["max_concurrency"] = self.open_loop.max_concurrency
        return body


@dataclass(frozen=True)
class Sweep:
    """One :class:`BenchResult` per concurrency level, ascending."""

    server: str
    workload: Workload
    points: tuple[BenchResult, ...]

    @property
    def levels(self) -> tuple[int, ...]:
        """The concurrency levels, ascending."""
        return tuple(point.concurrency for point in self.points)

    def __getitem__(self, concurrency: int) -> BenchResult:
        for point in self.points:
            if point.concurrency == concurrency:
                return point
        raise KeyError(f"no level {concurrency} in the sweep of {self.server} ({self.levels})")

    def __iter__(self) -> Iterator[BenchResult]:
        return iter(self.points)

    def __len__(self) -> int:
        return len(self.points)


class PackedRecords(Sequence[RequestRecord]):
    """Request records as one compressed pickle, chunk times as 32-bit offsets from the send.

    The session cache keeps tens of bytes per request instead of KBs; records are rebuilt on
    access (the metrics were computed before packing).
    """

    def __init__(self, records: Iterable[RequestRecord]) -> None:
        rows = [
            (replace(r, chunk_times=[]), array("f", [t - r.sent for t in r.chunk_times]))
            for r in records
        ]
        self._len = len(rows)
        self._blob = zlib.compress(pickle.dumps(rows, pickle.HIGHEST_PROTOCOL))

    def _unpacked(self) -> list[RequestRecord]:
        rows: list[tuple[RequestRecord, array[float]]] = pickle.loads(zlib.decompress(self._blob))
        for record, offsets in rows:
            record.chunk_times = [record.sent + offset for offset in offsets]
        return [record for record, _ in rows]

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: SupportsIndex) -> RequestRecord: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[RequestRecord, ...]: ...
    def __getitem__(
        self, index: SupportsIndex | slice
    ) -> RequestRecord | tuple[RequestRecord, ...]:
        return tuple(self._unpacked())[index]

    def __iter__(self) -> Iterator[RequestRecord]:
        return iter(self._unpacked())

    def __reversed__(self) -> Iterator[RequestRecord]:
        # Sequence's own would unpack the whole run once per record.
        return reversed(self._unpacked())

    def __repr__(self) -> str:
        return f"PackedRecords({len(self)} records, {len(self._blob)} bytes)"


def packed(measurement: Measurement) -> Measurement:
    """Return a fresh ``measurement`` with its records packed (see :class:`PackedRecords`)."""
    records = cast("tuple[RequestRecord, ...]", PackedRecords(measurement.records))
    warmup = cast("tuple[RequestRecord, ...]", PackedRecords(measurement.warmup_records))
    return replace(measurement, records=records, warmup_records=warmup)
