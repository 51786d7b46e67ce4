"""The results of measurements: what ``sglang_bench`` returns and the session cache keeps.

A :class:`BenchResult` holds the runs (each one :class:`Measurement`, the verdicts' sample
unit) of one server, workload and concurrency; a :class:`Sweep`, one result per level. Records
are packed in arrays (:class:`PackedRecords`) so that the session cache stays small.
"""

from __future__ import annotations

import math
import statistics
import sys
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, cast, overload

from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.schedule import OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.report.entries import MeasurementBody, Schedule

if TYPE_CHECKING:
    from pytest_sglang.server.handle import SGLangServer

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

    @classmethod
    def of(
        cls,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        runs: Sequence[Measurement],
        schedule: Schedule = "blocks",
        *,
        load: OpenLoop | None = None,
    ) -> BenchResult:
        """Return the result of ``runs`` on ``server``, their records packed."""
        config = {k: server.server_info[k] for k in CONFIG_KEYS if k in server.server_info}
        taken = tuple(packed(run) for run in runs)
        return cls(
            server.name,
            workload,
            concurrency,
            taken,
            config,
            schedule,
            server.url,
            open_loop=load,
            not_applicable=server.not_applicable,
        )

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
        if self.open_loop is not None:
            return f"{self.server} @ {self.open_loop.describe()}"
        return f"{self.server} @ C={self.concurrency}"

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


_NAN = float("nan")
_NONE_INT = -(2**62)  # stands for None in the packed integer columns
_FLOAT_COLUMNS = ("started", "sent", "scheduled", "end")
_INT_COLUMNS = (
    "index", "input_len", "output_len", "output_tokens_server", "output_tokens_client",
    "prompt_tokens", "spec_verify_ct", "status", "retries", "cached_tokens",
)  # fmt: skip
_BOOL_COLUMNS = ("warmup", "chunk_tokens_exact")
_FLOAT_DICT_COLUMNS = ("server_times",)
_CHUNK_COLUMNS = ("chunk_times", "chunk_tokens")


class _FloatDicts:
    """A column of ``dict[str, float] | None``: key sets shared, values in one array."""

    __slots__ = ("keysets", "starts", "values", "which")

    def __init__(self) -> None:
        self.keysets: list[tuple[str, ...]] = []
        self.which = array("i")  # index into keysets, -1 for None
        self.starts = array("q")
        self.values = array("d")

    def append(self, value: dict[str, float] | None, ids: dict[tuple[str, ...], int]) -> None:
        self.starts.append(len(self.values))
        if value is None:
            self.which.append(-1)
            return
        keys = tuple(value)
        if keys not in ids:
            ids[keys] = len(self.keysets)
            self.keysets.append(tuple(sys.intern(k) for k in keys))
        self.which.append(ids[keys])
        self.values.extend(value.values())

    def __getitem__(self, index: int) -> dict[str, float] | None:
        which = self.which[index]
        if which < 0:
            return None
        keys = self.keysets[which]
        start = self.starts[index]
        return dict(zip(keys, self.values[start : start + len(keys)], strict=True))


class PackedRecords(Sequence[RequestRecord]):
    """Request records stored column by column in arrays; records rebuilt on access.

    Every field is kept: times as 64-bit floats, chunk times as 32-bit offsets from the send
    (the metrics were computed before packing), counts in the narrowest integers that hold
    them, strings interned; unknown fields as they are. Tens of bytes per request, not KBs.
    """

    __slots__ = (
        "_bools", "_chunks", "_dicts", "_floats", "_ints", "_len", "_nones", "_objects",
        "_times", "_token_at", "_tokens",
    )  # fmt: skip

    def __init__(self, records: Iterable[RequestRecord]) -> None:
        names = [f.name for f in fields(RequestRecord)]
        self._floats = {name: array("d") for name in _FLOAT_COLUMNS if name in names}
        ints = {name: array("q") for name in _INT_COLUMNS if name in names}
        self._dicts = {name: _FloatDicts() for name in _FLOAT_DICT_COLUMNS if name in names}
        self._bools = {name: array("b") for name in _BOOL_COLUMNS if name in names}
        packed = {*self._floats, *ints, *self._bools, *self._dicts, *_CHUNK_COLUMNS}
        self._objects: dict[str, list[Any]] = {n: [] for n in names if n not in packed}
        keysets: dict[tuple[str, ...], int] = {}
        chunks = array("q", [0])  # offsets into the chunk times
        token_at = array("q")  # offsets into the token counts; -1: every chunk carried 1
        times = array("f")
        tokens = array("q")
        count = 0
        for record in records:
            for name, column in self._floats.items():
                value = getattr(record, name)
                column.append(_NAN if value is None else value)
            for name, column_ints in ints.items():
                number = getattr(record, name)
                column_ints.append(_NONE_INT if number is None else number)
            for name, flags in self._bools.items():
                flags.append(bool(getattr(record, name)))
            for name, dicts in self._dicts.items():
                dicts.append(getattr(record, name), keysets)
            for name, objects in self._objects.items():
                value = getattr(record, name)
                objects.append(sys.intern(value) if type(value) is str else value)
            sent = record.sent
            times.extend([t - sent for t in record.chunk_times])
            if all(n == 1 for n in record.chunk_tokens):
                token_at.append(-1)
            else:
                token_at.append(len(tokens))
                tokens.extend(record.chunk_tokens)
            chunks.append(len(times))
            count += 1
        self._len = count
        # Narrow the integer columns and drop the arrays' spare capacity.
        self._nones: dict[str, int] = {}
        self._ints: dict[str, array[int]] = {}
        for name, column_ints in ints.items():
            self._ints[name], self._nones[name] = _narrow(column_ints)
        self._chunks, _ = _narrow(chunks)
        self._token_at, _ = _narrow(token_at)
        self._tokens, _ = _narrow(tokens, unsigned=True)
        self._times = array("f", times)
        for dicts in self._dicts.values():
            dicts.starts, _ = _narrow(dicts.starts)
            dicts.which, _ = _narrow(dicts.which)
        self._floats = {name: array("d", column) for name, column in self._floats.items()}

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> RequestRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[RequestRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> RequestRecord | tuple[RequestRecord, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError("record index out of range")
        values: dict[str, Any] = {}
        for name, column in self._floats.items():
            value = column[index]
            values[name] = None if math.isnan(value) else value
        for name, ints in self._ints.items():
            number = ints[index]
            values[name] = None if number == self._nones[name] else number
        for name, flags in self._bools.items():
            values[name] = bool(flags[index])
        for name, dicts in self._dicts.items():
            values[name] = dicts[index]
        for name, objects in self._objects.items():
            values[name] = objects[index]
        start, end = self._chunks[index], self._chunks[index + 1]
        sent = values["sent"]
        at = self._token_at[index]
        count = end - start
        tokens = [1] * count if at < 0 else list(self._tokens[at : at + count])
        return RequestRecord(
            chunk_times=[sent + offset for offset in self._times[start:end]],
            chunk_tokens=tokens,
            **values,
        )

    def __iter__(self) -> Iterator[RequestRecord]:
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        return f"PackedRecords({len(self)} records, {len(self._times)} chunks)"


def _narrow(column: array[int], *, unsigned: bool = False) -> tuple[array[int], int]:
    """Return ``column`` in the narrowest of 8 (``unsigned``), 16, 32 or 64 bits.

    Also return its None stand-in: ``_NONE_INT`` (None) becomes the type's smallest value,
    which no count reaches (an ``unsigned`` column holds no None).
    """
    values = [v for v in column if v != _NONE_INT]
    low, high = (min(values), max(values)) if values else (0, 0)
    if unsigned and low >= 0 and high < 2**8:
        return array("B", column), _NONE_INT
    for code, bits in (("h", 16), ("i", 32)):
        smallest = -(2 ** (bits - 1))
        if smallest < low and high < 2 ** (bits - 1):
            return array(code, (smallest if v == _NONE_INT else v for v in column)), smallest
    return array("q", column), _NONE_INT


def packed(measurement: Measurement) -> Measurement:
    """Return ``measurement`` with its records packed (see :class:`PackedRecords`)."""
    if isinstance(measurement.records, PackedRecords):
        return measurement
    records = cast("tuple[RequestRecord, ...]", PackedRecords(measurement.records))
    warmup = cast("tuple[RequestRecord, ...]", PackedRecords(measurement.warmup_records))
    return replace(measurement, records=records, warmup_records=warmup)
