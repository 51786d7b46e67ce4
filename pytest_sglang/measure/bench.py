"""Repeated measurements of one server under one workload: what ``sglang_bench`` returns.

A :class:`BenchResult` holds the runs of one (server, workload, concurrency): each run is a
whole :class:`~pytest_sglang.measure.measurement.Measurement` with its warm-up excluded, the unit
of a sample for the verdicts. A :class:`Sweep` holds one result per concurrency level.
:class:`Bench` runs them, caches them for the session and records them for the report.

A measurement never passes silently broken: a run whose requests failed fails the test that
took it (``MeasurementFailed``: how many, which kinds, what the server said) unless the call
allowed errors (``allow_errors=0.05``: up to 5 % of each run's requests may fail). So does a
run whose validity check failed (``measure/checks.py``: the server's token counts disagree with
what it streamed, the outputs were not of the requested length...), unless the call allowed
that check (``allow_checks=["token_counts"]``); the checks of the load the client applied
(concurrency, schedule, client) make the run invalid for the verdicts only. A run with
failures also asks the pool whether the server died; a dead server fails the test naming
its death (``ServerDied``: exit code, log tail, hints), stops the remaining runs, and fails
every later test that needs it.

The session cache keeps every run's request records (``assert_slo`` judges them) packed in
arrays (:class:`PackedRecords`): about 90 bytes per request and 5 per streamed chunk,
instead of several kilobytes of Python objects, rebuilt as records on access; after each
run the memory it freed goes back to the system (:func:`give_back_memory`).
``benchmarks/soak.py`` measures what a 10,000-request run leaves behind.
"""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import math
import statistics
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, NoReturn, cast, overload

from pytest_sglang.loadgen.ray_pools import RayPools
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.schedule import Arrival, OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.metrics import metric_spec
from pytest_sglang.measure.plans import DEFAULT_REPEATS, MeasurementPlans
from pytest_sglang.report.entries import MeasurementBody, Schedule
from pytest_sglang.report.progress import RunLine

if TYPE_CHECKING:
    from pytest_sglang.errors import SGLangError
    from pytest_sglang.gpu.telemetry import TelemetryReader, TelemetrySampler
    from pytest_sglang.loadgen.records import LoadRun
    from pytest_sglang.loadgen.runner import LoadGenerator
    from pytest_sglang.measure.server_metrics import MetricsSnapshot
    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = [
    "CONFIG_KEYS",
    "Bench",
    "BenchResult",
    "PackedRecords",
    "Sweep",
    "cut_by",
    "effective_max_running_requests",
    "give_back_memory",
    "load_generator_for",
]

#: Server-info keys that decide whether two servers' results are comparable.
CONFIG_KEYS = (
    "model_path", "served_model_name", "tp_size", "dp_size", "context_length",
    "max_running_requests", "speculative_algorithm", "speculative_num_steps",
    "speculative_eagle_topk", "speculative_num_draft_tokens", "attention_backend",
    "mem_fraction_static", "version",
)  # fmt: skip
#: How many kinds of failure, and how many characters of each example, a failure names.
FAILURE_KINDS = 5
_EXAMPLE_CHARS = 300


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
    #: What cut the measurement short, if something did (a test timeout, Ctrl-C): its runs
    #: are those that finished, the cut one last with the requests it had finished.
    cut: str | None = None
    #: How many of ``runs`` are whole when the measurement was cut (the rest is the cut run).
    finished_runs: int | None = None
    #: An open-loop measurement's load (rate, arrivals, cap); ``None`` for a closed loop,
    #: whose load is ``concurrency`` (an open loop's ``concurrency`` is its cap, or 0).
    open_loop: OpenLoop | None = None
    #: The checks that did not apply to the server, and why: a plain OpenAI-compatible
    #: server has no /server_info, counters or meta_info (``SGLangServer.not_applicable``).
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
        if self.open_loop is not None:
            return f"{self.server} @ {self.open_loop.describe()}"
        return f"{self.server} @ C={self.concurrency}"

    def as_dict(self) -> MeasurementBody:
        """Return plain JSON types, for reports."""
        body: MeasurementBody = {
            "server": self.server, "url": self.url, "workload": self.workload.as_dict(),
            "concurrency": self.concurrency, "schedule": self.schedule,
            "config": dict(self.config), "runs": [run.as_dict() for run in self.runs],
        }  # fmt: skip
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
#: Columns of ``bool``.
_BOOL_COLUMNS = ("warmup", "chunk_tokens_exact")
#: Columns of ``dict[str, float] | None`` (a record's server timings).
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

    Every field is kept: the request's own times as 64-bit floats, its chunks' arrival
    times as 32-bit offsets from its send (within a microsecond for a 10-second stream;
    the run's metrics were computed from the exact records before packing), counts in the
    narrowest integers that hold them (chunk token counts only where a chunk carried other
    than one token), the server's timings in one array per run. The records of a run are
    packed once its measurement is computed, so that the session cache keeps about 90
    bytes per request and 5 per chunk instead of the records' objects (about 0.5 KB and 40
    bytes), and no small object per request that would pin the allocator's arenas: strings
    are interned (an error message of its own stays a string). Fields it does not know
    (added to ``RequestRecord`` later) are kept as they are.
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
        # Narrow every integer column to 32 (or 16) bits where its values fit, and drop
        # the arrays' spare capacity: what stays in the session cache is what it needs.
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


def _packed(measurement: Measurement) -> Measurement:
    """Return ``measurement`` with its records packed (see :class:`PackedRecords`)."""
    if isinstance(measurement.records, PackedRecords):
        return measurement
    records = cast("tuple[RequestRecord, ...]", PackedRecords(measurement.records))
    warmup = cast("tuple[RequestRecord, ...]", PackedRecords(measurement.warmup_records))
    return replace(measurement, records=records, warmup_records=warmup)


def give_back_memory() -> None:
    """Return the memory a finished run freed to the system.

    A run's peak (every record, every event's objects) is transient, but the C allocator
    keeps freed memory for reuse: after a 10,000-request run the process would stay at its
    peak. A full collection, then glibc's ``malloc_trim`` (Linux), give it back; elsewhere
    only the collection runs.
    """
    gc.collect()
    if not sys.platform.startswith("linux"):
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl has no malloc_trim)
        return
    trim(0)


def effective_max_running_requests(server_info: dict[str, Any]) -> int | None:
    """Return how many requests the server runs at once, all DP ranks together, or None.

    The real server reports an argument that was not given as ``null`` in ``/server_info``
    (``max_running_requests``); the value in effect is the scheduler's
    ``internal_states[i].effective_max_running_requests_per_dp``, one per DP rank.
    """
    states = server_info.get("internal_states")
    if isinstance(states, list) and states:
        per_dp = [
            s.get("effective_max_running_requests_per_dp") for s in states if isinstance(s, dict)
        ]
        if per_dp and all(isinstance(v, int) and v > 0 for v in per_dp):
            return sum(cast("list[int]", per_dp))
    given = server_info.get("max_running_requests")
    return given if isinstance(given, int) and not isinstance(given, bool) and given > 0 else None


def _validated_levels(concurrency: object) -> list[int]:
    levels = (
        [concurrency] if not isinstance(concurrency, (list, tuple, range)) else list(concurrency)
    )
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, int):
            raise TypeError(
                f"concurrency must be a positive int or a list of them, got {concurrency!r} "
                f"({type(level).__name__} {level!r}); write e.g. concurrency=8 or "
                "concurrency=[1, 8, 64]"
            )
    if not levels or any(c < 1 for c in cast("list[int]", levels)):
        raise ValueError(
            f"concurrency must be a positive int or a list of them, got {concurrency!r}"
        )
    if len(set(levels)) != len(levels):
        raise ValueError(f"concurrency levels must be distinct, got {concurrency!r}")
    return cast("list[int]", levels)


def _validated_repeats(repeats: object) -> int:
    if isinstance(repeats, bool) or not isinstance(repeats, int):
        raise TypeError(
            f"repeats must be a whole number of runs, got {type(repeats).__name__} {repeats!r}; "
            "write e.g. repeats=5"
        )
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    return repeats


@dataclass(frozen=True)
class _Budget:
    """What a call allows: a fraction of each run's requests failing, and named checks."""

    errors: float
    checks: frozenset[str] = frozenset()


def _validated_budget(allow_errors: object, allow_checks: Iterable[str] = ()) -> _Budget:
    return _Budget(_validated_errors(allow_errors), _validated_checks(allow_checks))


def _validated_checks(allow_checks: object) -> frozenset[str]:
    from pytest_sglang.measure.checks import CHECK_NAMES

    if isinstance(allow_checks, str) or not isinstance(allow_checks, Iterable):
        raise TypeError(
            f"allow_checks is a list of validity check names, got {allow_checks!r}; write "
            'e.g. allow_checks=["token_counts"]'
        )
    names = frozenset(allow_checks)
    for name in sorted(names, key=str):
        if name not in CHECK_NAMES:
            raise ValueError(
                f"allow_checks: no validity check {name!r}; the checks are "
                f"{', '.join(CHECK_NAMES)} (docs/metrics.md, 'Validity checks')"
            )
    return names


def _validated_errors(allow_errors: object) -> float:
    if isinstance(allow_errors, bool) or not isinstance(allow_errors, (int, float)):
        raise TypeError(
            f"allow_errors is the fraction of a run's requests that may fail, got "
            f"{allow_errors!r}; write e.g. allow_errors=0.05"
        )
    if not 0.0 <= allow_errors <= 1.0:
        raise ValueError(
            f"allow_errors must be between 0 and 1 (a fraction of each run's requests), got "
            f"{allow_errors!r}"
        )
    return float(allow_errors)


def failed_requests_message(result: BenchResult, allow_errors: float) -> str | None:
    """Return why ``result`` breaks its error budget (None when every run keeps it)."""
    over = [
        (index, run)
        for index, run in enumerate(result.runs)
        if run.requests and run.failed / run.requests > allow_errors
    ]
    if not over:
        return None
    failed = sum(run.failed for _, run in over)
    requests = sum(run.requests for _, run in over)
    budget = (
        "no failed request is allowed"
        if allow_errors == 0
        else f"at most {allow_errors:.1%} of each run's requests may fail"
    )
    runs = ", ".join(f"run {i + 1}: {run.failed} of {run.requests}" for i, run in over)
    lines = [
        f"the measurement of {result.label()} ({result.url}) is broken: {failed} of {requests} "
        f"measured requests failed ({runs}); {budget}",
    ]
    lines += failure_kinds([run for _, run in over])
    lines.append(
        "  fix: find out why the server failed them (its log); if failures are expected, "
        "allow them: sglang_bench(..., allow_errors=0.05)"
    )
    return "\n".join(lines)


def failed_checks_message(result: BenchResult, allowed: frozenset[str]) -> str | None:
    """Return why ``result``'s runs are invalid (None when every failed check is allowed).

    ``no_failed_requests`` is judged by the error budget (:func:`failed_requests_message`)
    and the checks of the load the client applied (``LOAD_CHECKS``) by the verdicts; every
    other check that failed, and is not in ``allowed``, breaks the measurement.
    """
    from pytest_sglang.measure.checks import LOAD_CHECKS

    failed: dict[str, list[int]] = {}
    lines = []
    for index, run in enumerate(result.runs):
        for check in run.checks:
            if check.passed is False and check.name not in allowed | _BUDGETED | LOAD_CHECKS:
                failed.setdefault(check.name, []).append(index)
                lines.append(f"  run {index + 1}: {check.name}: {check.detail}")
    if not failed:
        return None
    names = ", ".join(f'"{name}"' for name in failed)
    return "\n".join(
        [
            f"the measurement of {result.label()} ({result.url}) is invalid: a validity "
            f"check failed ({', '.join(failed)}), so its figures are not what the workload "
            "asked for",
            *lines,
            "  fix: find out why (docs/metrics.md, 'Validity checks'); if the server is known "
            f"to fail it and the figures still serve, allow it: sglang_bench(..., "
            f"allow_checks=[{names}])",
        ]
    )


#: Checks a budget of its own governs (``allow_errors``).
_BUDGETED = frozenset({"no_failed_requests"})


def failure_kinds(runs: Sequence[Measurement]) -> list[str]:
    """Return lines counting the failed requests of ``runs`` by kind, each with an example.

    The kind is the error message's head (``HTTP 500``, ``stalled``, ``connection
    refused``...); the example is the rest of one such message: what the server said.
    """
    kinds: dict[str, int] = {}
    examples: dict[str, str] = {}
    for run in runs:
        for record in run.records:
            if record.error is None:
                continue
            kind = _kind(record.error)
            kinds[kind] = kinds.get(kind, 0) + 1
            examples.setdefault(kind, record.error)
    if not kinds:
        return []
    lines = ["  failures by kind (the server's answer quoted):"]
    ranked = sorted(kinds.items(), key=lambda item: -item[1])
    for kind, count in ranked[:FAILURE_KINDS]:
        example = examples[kind]
        if example.startswith(kind + ": "):
            example = example[len(kind) + 2 :]
        if len(example) > _EXAMPLE_CHARS:
            example = example[:_EXAMPLE_CHARS] + " …"
        lines.append(f"    {count} x {kind}: {example}")
    if len(ranked) > FAILURE_KINDS:
        lines.append(f"    ... and {len(ranked) - FAILURE_KINDS} other kinds")
    return lines


def impossible_counts_message(result: BenchResult) -> str | None:
    """Return why ``result``'s token counts cannot be right (negative), or None.

    A server (or a proxy) that reports negative ``completion_tokens`` or ``prompt_tokens``
    would make a negative throughput: the measurement is broken, not slow.
    """
    for index, run in enumerate(result.runs):
        bad = [
            r
            for r in run.records
            if (r.output_tokens is not None and r.output_tokens < 0)
            or (r.prompt_tokens is not None and r.prompt_tokens < 0)
        ]
        if bad or run.output_tokens < 0 or run.input_tokens < 0:
            example = bad[0] if bad else None
            detail = (
                f" (e.g. request {example.index}: completion_tokens {example.output_tokens}, "
                f"prompt_tokens {example.prompt_tokens})"
                if example is not None
                else ""
            )
            return (
                f"the measurement of {result.label()} ({result.url}) is broken: run "
                f"{index + 1}: the server reported negative token counts for {len(bad)} "
                f"requests{detail}; its throughput ({run.output_throughput:.1f} tok/s) means "
                "nothing: check the server (or a proxy in between) and its usage reporting"
            )
    return None


def _kind(message: str) -> str:
    from pytest_sglang.measure.checks import error_kind

    return error_kind(message)


_Key = tuple[str, str, int, int]


class _Interrupted(Exception):
    """A run that ended the measurement (its server died, or the run gave up)."""

    def __init__(self, measurement: Measurement, error: SGLangError) -> None:
        super().__init__(str(error))
        self.measurement = measurement
        self.error = error


class Bench:
    """Measure workloads on servers: the object the ``sglang_bench`` fixture returns.

    ``bench(SERVER, workload, concurrency=1, repeats=5)`` measures ``repeats`` runs of
    ``workload`` with ``concurrency`` requests in flight on the server or profile SERVER (a
    name, launched through the pool when it is a profile, or an :class:`SGLangServer`). A
    list of concurrencies returns a :class:`Sweep`. Results are cached per (server,
    workload, concurrency, repeats) for the session, so tests share measurements.
    """

    def __init__(
        self,
        pool: ServerPool,
        *,
        record: Callable[[BenchResult, SGLangServer | None], None] = lambda result, server: None,
        progress: Callable[[str], None] = lambda message: None,
        generator_options: dict[str, Any] | None = None,
        unavailable: Callable[[str], NoReturn] | None = None,
        failure: Callable[[str], NoReturn] | None = None,
        shared: Bench | None = None,
        server_failed: Callable[[str, SGLangError], None] = lambda name, error: None,
        during: str = "",
        plans: MeasurementPlans | None = None,
        run_line: RunLine | None = None,
    ) -> None:
        self.pool = pool
        #: Each run's live progress line (``report/progress.py``); a view shares its origin's.
        self._run_line: RunLine = (
            (run_line or RunLine(None, lambda write: write()))
            if shared is None
            else shared._run_line
        )
        # What the selected tests declared (sglang_measure): taken when a server launches.
        self._plans: MeasurementPlans = (
            (plans or MeasurementPlans()) if shared is None else shared._plans
        )
        self._server_failed = server_failed
        #: Who measures (a test id), for the message when a server dies under the load.
        self._during = during
        self._record = record
        self._progress = progress
        self._options = generator_options or {}
        # A view (``with_recorder``) shares its origin's cache and handles: one session cache.
        self._cache: dict[_Key, BenchResult] = {} if shared is None else shared._cache
        # The server each result was measured on, for the report (without relaunching it).
        self._handles: dict[str, SGLangServer] = {} if shared is None else shared._handles
        self._on_unavailable = unavailable
        self._on_failure = failure
        # Servers whose cap was already pointed out (one note per server and level).
        self._noted: set[tuple[str, int]] = set() if shared is None else shared._noted
        # GPU telemetry during runs: one reader per session, made on first use.
        self._gpu: _GpuTelemetry = _GpuTelemetry(pool) if shared is None else shared._gpu
        # The finished part of a run a test timeout or Ctrl-C cut, until it is reported.
        self._interrupted: LoadRun | None = None
        # The results handed to a test's recorder (by id; the cache keeps them alive), and
        # the cut measurements no test recorded: what an interrupted session still reports.
        self._recorded: set[int] = set() if shared is None else shared._recorded
        self._unrecorded_cuts: list[tuple[BenchResult, SGLangServer]] = (
            [] if shared is None else shared._unrecorded_cuts
        )
        # Ray load workers (--sglang-ray-address), kept from run to run for the session.
        self._ray_pools: RayPools = RayPools() if shared is None else shared._ray_pools

    def close(self) -> None:
        """Release what the bench keeps between runs (the Ray load-worker actors)."""
        self._ray_pools.close()

    def take_unreported(self) -> list[tuple[BenchResult, SGLangServer | None]]:
        """Return, once, the measurements taken that no test has recorded, with their server.

        Those taken for tests that have not run yet (declared ones, taken at a launch), and
        those cut while being taken so: what an interrupted session reports for the test
        that was running, so that no finished run is lost.
        """
        taken = [
            (result, self._handles.get(result.server))
            for result in self._cache.values()
            if id(result) not in self._recorded
        ]
        taken += self._unrecorded_cuts
        self._unrecorded_cuts.clear()
        self._recorded.update(id(result) for result, _ in taken)
        return taken

    def with_recorder(
        self,
        record: Callable[[BenchResult, SGLangServer | None], None],
        unavailable: Callable[[str], NoReturn] | None = None,
        failure: Callable[[str], NoReturn] | None = None,
        server_failed: Callable[[str, SGLangError], None] = lambda name, error: None,
        during: str = "",
    ) -> Bench:
        """Return a view of this bench (same cache) that records results with ``record``.

        ``unavailable`` receives the message when a server is not configured or cannot be
        launched here (the fixture skips the test), ``failure`` when its gate or launch
        failed (the fixture fails the test with the message alone); without them the errors
        propagate.
        """
        return Bench(
            self.pool,
            record=record,
            progress=self._progress,
            generator_options=self._options,
            unavailable=unavailable,
            failure=failure,
            shared=self,
            server_failed=server_failed,
            during=during,
        )

    def _server(self, name: str, *, why: str = "") -> SGLangServer:
        from pytest_sglang.errors import ServerUnavailable, SGLangError

        __tracebackhide__ = True
        try:
            return self.pool.get(name, during=self._during, why=why)
        except ServerUnavailable as exc:
            if self._on_unavailable is None:
                raise
            message, handler = str(exc), self._on_unavailable
        except SGLangError as exc:
            self._server_failed(name, exc)
            if self._on_failure is None:
                raise
            message, handler = str(exc), self._on_failure
        handler(message)

    def _fail(self, error: SGLangError) -> NoReturn:
        """Fail the test with ``error`` (through the fixture's handler, or raise it)."""
        __tracebackhide__ = True
        if self._on_failure is None:
            raise error
        try:
            self._on_failure(str(error))
        except BaseException as failed:
            # Called while handling the run's interruption: the failure says it all; its
            # context would print the same message again ("During handling of...").
            failed.__suppress_context__ = True
            raise

    @overload
    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int = 1,
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
        rate: float | None = None,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
    ) -> BenchResult: ...

    @overload
    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: Sequence[int],
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
    ) -> Sweep: ...

    def __call__(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int | Sequence[int] = 1,
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
        rate: float | None = None,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
    ) -> BenchResult | Sweep:
        """Measure (or fetch from the cache); see the class docstring.

        ``allow_errors`` is the fraction of each run's requests that may fail (default 0):
        a run beyond it fails the test (:class:`~pytest_sglang.errors.MeasurementFailed`).
        So does a run whose validity check failed, unless ``allow_checks`` names the check
        (e.g. ``["token_counts"]`` for a server known to over-count); the result still says
        the check failed (``valid`` is False, the table marks the row).

        ``rate`` measures an open loop instead: requests leave at ``rate`` per second
        (``arrival`` ``"poisson"`` or ``"constant"``) whether or not earlier ones finished,
        with at most ``max_concurrency`` in flight when given; the result is cached with the
        rate, arrivals and cap in its key, and its label and report rows show the rate.
        """
        __tracebackhide__ = True
        if rate is not None or max_concurrency is not None:
            if rate is None:
                raise ValueError(
                    "max_concurrency caps an open loop: give its rate too, e.g. "
                    "sglang_bench(server, workload, rate=20.0, max_concurrency=64)"
                )
            if concurrency != 1:
                raise ValueError(
                    f"give concurrency (a closed loop) or rate (an open loop), not both (got "
                    f"concurrency={concurrency!r}, rate={rate!r}); cap the requests an open "
                    "loop keeps in flight with max_concurrency"
                )
            load = OpenLoop(rate, arrival, max_concurrency)
            return self._measure_open(server, workload, load, _validated_repeats(repeats),
                                      _validated_budget(allow_errors, allow_checks))  # fmt: skip
        levels = _validated_levels(concurrency)
        repeats = _validated_repeats(repeats)
        budget = _validated_budget(allow_errors, allow_checks)
        points = tuple(
            self._measure(server, workload, level, repeats, budget) for level in sorted(levels)
        )
        if isinstance(concurrency, int):
            return points[0]
        name = server if isinstance(server, str) else server.name
        return Sweep(name, workload, points)

    def pair(
        self,
        a: str,
        b: str,
        workload: Workload,
        concurrency: int = 1,
        repeats: int = DEFAULT_REPEATS,
        *,
        allow_errors: float = 0.0,
        allow_checks: Iterable[str] = (),
    ) -> tuple[BenchResult, BenchResult]:
        """Measure two servers under the same workload and concurrency.

        Runs are interleaved A B A B when both can be served at once (two attached URLs), so
        that drift cancels; in blocks otherwise (launched profiles share the GPUs). The
        schedule is recorded in both results. ``allow_errors``, ``allow_checks`` as for a single
        call. Both servers are held for the whole comparison (an attached one from the start,
        a launched one once up): no other pytest-xdist worker measures either meanwhile.
        """
        __tracebackhide__ = True
        with self.pool.measuring(a, b, during=self._during):
            return self._pair(a, b, workload, concurrency, repeats, allow_errors, allow_checks)

    def _pair(
        self,
        a: str,
        b: str,
        workload: Workload,
        concurrency: int,
        repeats: int,
        allow_errors: float,
        allow_checks: Iterable[str],
    ) -> tuple[BenchResult, BenchResult]:
        __tracebackhide__ = True
        (level,) = _validated_levels(concurrency)
        repeats = _validated_repeats(repeats)
        budget = _validated_budget(allow_errors, allow_checks)
        attached = {s.name for s in self.pool.settings.servers}
        keys = [self._key(name, workload, level, repeats) for name in (a, b)]
        fresh = not any(key in self._cache for key in keys)
        if a in attached and b in attached and fresh:
            self._check_fills(workload, level)
            servers = (self._server(a), self._server(b))
            runs: tuple[list[Measurement], list[Measurement]] = ([], [])
            for repeat in range(repeats):
                for side, server in enumerate(servers):
                    try:
                        runs[side].append(self._run(server, workload, level, repeat, repeats))
                    except _Interrupted as stop:
                        runs[side].append(stop.measurement)
                        self._record(
                            self._result(server, workload, level, runs[side], "interleaved"),
                            server,
                        )
                        self._fail(stop.error)
                    except BaseException as error:
                        # A test timeout or Ctrl-C: both sides' finished runs are reported,
                        # the cut run with the side it was measuring.
                        for each in (side, 1 - side):
                            self._record_cut(servers[each], workload, level, runs[each],
                                             repeats, error, schedule="interleaved")  # fmt: skip
                        raise
            for side, server in enumerate(servers):
                result = self._result(server, workload, level, runs[side], "interleaved")
                self._cache[keys[side]] = result
        first = self(a, workload, level, repeats, allow_errors=budget.errors,
                     allow_checks=budget.checks)  # fmt: skip
        second = self(b, workload, level, repeats, allow_errors=budget.errors,
                      allow_checks=budget.checks)  # fmt: skip
        assert isinstance(first, BenchResult) and isinstance(second, BenchResult)
        return first, second

    # -- internals ------------------------------------------------------------------------

    @staticmethod
    def _check_fills(workload: Workload, concurrency: int) -> None:
        sent = workload.for_concurrency(concurrency).requests
        if sent < concurrency:
            raise ValueError(
                f"a run at concurrency {concurrency} with {sent} requests can never hold "
                f"{concurrency} requests in flight; give the workload requests >= "
                f"{concurrency}, or requests_per_slot (e.g. requests_per_slot=2) to scale "
                "the requests with the level"
            )

    @staticmethod
    def _key(server: str, workload: Workload, concurrency: int, repeats: int) -> _Key:
        return (server, workload.key(), concurrency, repeats)

    def _measure(
        self,
        server: str | SGLangServer,
        workload: Workload,
        concurrency: int,
        repeats: int,
        budget: _Budget,
    ) -> BenchResult:
        __tracebackhide__ = True
        name = server if isinstance(server, str) else server.name
        key = self._key(name, workload, concurrency, repeats)
        if key not in self._cache:
            self._check_fills(workload, concurrency)
            if isinstance(server, str):
                handle = self._server(server, why=self._undeclared(key, concurrency))
            else:
                handle = server
            # Launching the server may have taken this measurement (it was declared).
            if key not in self._cache:
                self._fill(handle, workload, concurrency, repeats, key)
        return self._judged(self._cache[key], budget)

    def _judged(self, result: BenchResult, budget: _Budget) -> BenchResult:
        """Record ``result`` for the test, then fail it if it is broken or invalid.

        Broken: more failed requests than the budget allows, or impossible counts; invalid:
        a validity check failed that the call did not allow.
        """
        __tracebackhide__ = True
        # Recorded first: the report keeps a broken measurement too, with its errors.
        self._record(result, self._handles.get(result.server))
        self._recorded.add(id(result))
        broken = (
            failed_requests_message(result, budget.errors)
            or impossible_counts_message(result)
            or failed_checks_message(result, budget.checks)
        )
        if broken is not None:
            from pytest_sglang.errors import MeasurementFailed

            self._fail(MeasurementFailed(broken))
        return result

    def _fill(
        self,
        handle: SGLangServer,
        workload: Workload,
        concurrency: int,
        repeats: int,
        key: _Key,
        *,
        load: OpenLoop | None = None,
    ) -> None:
        """Measure ``repeats`` runs on ``handle`` into the session cache.

        A closed loop at ``concurrency``, or the open loop ``load`` (``concurrency`` is then
        its cap, 0 for none).
        """
        __tracebackhide__ = True
        if load is None:
            self._note_cap(handle, concurrency)
        runs: list[Measurement] = []
        try:
            # extend keeps the runs done before an interruption.
            with self.pool.measuring(handle, during=self._during):
                runs.extend(
                    self._run(handle, workload, concurrency, repeat, repeats, load=load)
                    for repeat in range(repeats)
                )
        except _Interrupted as stop:
            # Not cached (it is no measurement), but reported: what the runs saw.
            runs.append(stop.measurement)
            partial = self._result(handle, workload, concurrency, runs, "blocks", load=load)
            self._record(partial, handle)
            self._fail(stop.error)
        except BaseException as error:
            # A test timeout or Ctrl-C: report what was measured, then let it end the test.
            self._record_cut(handle, workload, concurrency, runs, repeats, error, load=load)
            raise
        self._cache[key] = self._result(handle, workload, concurrency, runs, "blocks", load=load)

    def take_declared(self, server: SGLangServer) -> None:
        """Take every measurement the selected tests declared for ``server``, now it is up.

        The pool calls this right after it launched ``server`` (see
        :mod:`pytest_sglang.measure.plans`); the tests that declared them read the cache.
        A measurement that fails here is not cached: the test that asks for it measures
        again and fails with its own message (a dead server fails it at once).
        """
        pending = [
            declared
            for declared in self._plans.for_server(server.name)
            if self._key(server.name, declared.workload, declared.concurrency, declared.repeats)
            not in self._cache
        ]
        if not pending:
            return
        self._progress(
            f"sglang: {server.name!r} is up: taking the {len(pending)} measurement(s) declared "
            f"for it ({', '.join(d.label() for d in pending)})"
        )

        def keep_cut(result: BenchResult, handle: SGLangServer | None) -> None:
            if result.cut is not None and handle is not None:  # Ctrl-C: reported at the end
                self._unrecorded_cuts.append((result, handle))

        quiet = self.with_recorder(keep_cut)
        for number, declared in enumerate(pending, 1):
            key = self._key(server.name, declared.workload, declared.concurrency, declared.repeats)
            started = time.monotonic()
            try:
                quiet._check_fills(declared.workload, declared.concurrency)
                quiet._fill(server, declared.workload, declared.concurrency, declared.repeats, key)
            except Exception as exc:  # the declaring test measures again, and says why
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                self._progress(
                    f"sglang: the declared measurement {declared.label()} failed: {first}"
                )
                if self.pool.check(server.name) is not None:
                    return  # the server died: the tests that need it fail naming the death
                continue
            # A sweep of declared measurements takes minutes: a line each, for CI logs.
            self._progress(
                f"sglang: declared measurement {number}/{len(pending)} of {server.name!r} "
                f"done: {declared.label()} in {time.monotonic() - started:.0f}s"
            )

    def _undeclared(self, key: _Key, concurrency: int) -> str:
        """Say why a launch for this measurement may be a relaunch (for the summary)."""
        if not len(self._plans) or self._plans.declares(key):
            return ""
        return (
            f"a measurement no selected test declared ({key[0]} @ C={concurrency}, "
            f"x{key[3]}): add it to the test's @pytest.mark.sglang_measure so that it is "
            "taken while the server is up"
        )

    def _record_cut(
        self,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        runs: list[Measurement],
        repeats: int,
        error: BaseException,
        *,
        load: OpenLoop | None = None,
        schedule: Schedule = "blocks",
    ) -> None:
        """Record the runs of a measurement something cut short, saying what (not cached)."""
        from pytest_sglang.measure.measurement import measure

        interrupted, self._interrupted = self._interrupted, None
        finished = list(runs)
        if interrupted is not None and interrupted.measured:
            try:
                finished.append(_packed(measure(interrupted)))
            except ValueError:
                pass  # too little to measure: the finished runs stand alone
        if not finished:
            return  # nothing finished: the test's own failure says what cut it
        cut = f"{cut_by(error)}, in run {len(runs) + 1} of {repeats}"
        result = self._result(server, workload, concurrency, finished, schedule, load=load)
        self._record(replace(result, cut=cut, finished_runs=len(runs)), server)
        self._progress(f"sglang: the measurement {result.label()} was cut: {cut}")

    def _measure_open(
        self,
        server: str | SGLangServer,
        workload: Workload,
        load: OpenLoop,
        repeats: int,
        budget: _Budget,
    ) -> BenchResult:
        """Measure (or fetch) ``repeats`` open-loop runs at ``load``; cached by its key."""
        __tracebackhide__ = True
        name = server if isinstance(server, str) else server.name
        level = load.max_concurrency or 0
        key = (name, f"{workload.key()}|{load.key()}", level, repeats)
        if key not in self._cache:
            handle = self._server(server) if isinstance(server, str) else server
            self._fill(handle, workload, level, repeats, key, load=load)
        return self._judged(self._cache[key], budget)

    def run_once(
        self,
        server: str | SGLangServer,
        workload: Workload,
        *,
        concurrency: int | None = None,
        rate: float | None = None,
        arrival: Arrival = "poisson",
        max_concurrency: int | None = None,
        repeat: int = 0,
    ) -> Measurement:
        """Measure one run, neither cached nor reported: what a capacity search spends.

        A closed loop at ``concurrency``, or an open loop at ``rate`` (``arrival``,
        ``max_concurrency``); ``repeat`` numbers the run (each repeat sends other prompts).
        The server's counters and GPU telemetry are read as for ``sglang_bench``. E.g.
        ``find_capacity(lambda r, i: sglang_bench.run_once("eagle3", w, rate=r, repeat=i),
        [5, 10, 20, 40], "ttft.p99 <= 1s", unit="rate")``.
        """
        __tracebackhide__ = True
        if (concurrency is None) == (rate is None):
            raise ValueError("run_once measures a closed loop (concurrency=C) or an open loop "
                             f"(rate=R): give one, got concurrency={concurrency!r}, "
                             f"rate={rate!r}")  # fmt: skip
        load = None if rate is None else OpenLoop(rate, arrival, max_concurrency)
        level = concurrency if concurrency is not None else max_concurrency or 0
        if load is None:
            self._check_fills(workload, level)
        handle = self._server(server) if isinstance(server, str) else server
        try:
            with self.pool.measuring(handle, during=self._during):
                return self._run(handle, workload, level, repeat, repeat + 1, load=load)
        except _Interrupted as stop:
            self._fail(stop.error)

    def _note_cap(self, server: SGLangServer, concurrency: int) -> None:
        """Say so when ``concurrency`` exceeds the requests the server runs at once."""
        cap = effective_max_running_requests(server.server_info)
        if cap is None or concurrency <= cap or (server.name, concurrency) in self._noted:
            return
        self._noted.add((server.name, concurrency))
        given = server.server_info.get("max_running_requests")
        source = "" if given == cap else f" (in effect; /server_info says {given})"
        self._progress(
            f"sglang: note: C={concurrency} exceeds {server.name}'s max_running_requests of "
            f"{cap}{source}: {concurrency - cap} requests at a time wait in the server's "
            "queue, and their TTFT includes that wait"
        )

    def _result(
        self,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        runs: list[Measurement],
        schedule: Schedule,
        *,
        load: OpenLoop | None = None,
    ) -> BenchResult:
        self._handles[server.name] = server
        config = {k: server.server_info[k] for k in CONFIG_KEYS if k in server.server_info}
        packed = tuple(_packed(run) for run in runs)
        return BenchResult(server.name, workload, concurrency, packed, config, schedule,
                           server.url, open_loop=load,
                           not_applicable=server.not_applicable)  # fmt: skip

    def _run(
        self,
        server: SGLangServer,
        workload: Workload,
        concurrency: int,
        repeat: int,
        repeats: int,
        *,
        load: OpenLoop | None = None,
    ) -> Measurement:
        from pytest_sglang.measure.measurement import measure

        _check_endpoint(server, workload)
        at = f"C={concurrency}" if load is None else load.describe()
        label = f"{server.name} {at} run {repeat + 1}/{repeats}"
        last = [0.0]

        live = self._run_line
        line = [""]

        def progress(done: int, total: int, output_tokens: int, elapsed: float) -> None:
            # The generator's ticker calls at most once a second, reading its counters: the
            # run's line in place on a terminal; elsewhere a line every 10 s, for CI logs.
            rate = output_tokens / elapsed if elapsed > 0 else 0.0
            line[0] = f"sglang: measuring {label}: {done}/{total} requests, {rate:.0f} output tok/s"
            live.show(line[0])
            now = time.monotonic()
            if now - last[0] >= 10.0 and not live.in_place and not live.quiet:
                last[0] = now
                self._progress(line[0])

        last[0] = time.monotonic()
        from pytest_sglang.loadgen.placement import closed_loop_on_workers, open_loop_on_workers
        from pytest_sglang.loadgen.runner import ServerStoppedAnswering

        counters = _CounterScrapes(server)
        sampler = self._gpu.sampler(server)

        def before_measured() -> None:
            counters.before()
            if sampler is not None:
                sampler.start()

        # Where the load runs (--sglang-load-workers, --sglang-ray-address, docs/scaling.md)
        # is the bench's choice, not a generator option.
        options = dict(self._options)
        workers = int(options.pop("load_workers", 1))
        ray_address = options.pop("ray_address", None)
        generator = load_generator_for(
            server, progress=progress, before_measured=before_measured, **options
        )
        stopped: ServerStoppedAnswering | None = None
        try:
            if load is None:
                run = closed_loop_on_workers(
                    generator, workload.for_concurrency(concurrency), concurrency, repeat=repeat,
                    workers=workers, ray_address=ray_address, before_measured=before_measured,
                    ray_pools=self._ray_pools,
                )  # fmt: skip
            else:
                run = open_loop_on_workers(
                    generator, workload.for_concurrency(load.max_concurrency or 1), load.rate,
                    arrival=load.arrival, max_concurrency=load.max_concurrency, repeat=repeat,
                    workers=workers, ray_address=ray_address, before_measured=before_measured,
                    ray_pools=self._ray_pools,
                )  # fmt: skip
        except ServerStoppedAnswering as exc:
            stopped, run = exc, exc.run
        except BaseException:
            self._interrupted = generator.interrupted_run  # for the report (_record_cut)
            raise
        finally:
            if sampler is not None and sampler.started_at:
                sampler.stop()
        if line[0]:
            live.end(line[0])
        measurement = measure(run)
        if stopped is None:
            measurement = dataclasses.replace(measurement, server_counters=counters.delta())
        if sampler is not None and sampler.started_at:
            measurement = _with_telemetry(measurement, sampler)
        # Pack the records and give the run's peak back: the session cache keeps results.
        measurement = _packed(measurement)
        del run, generator
        if stopped is not None:
            stopped.run = dataclasses.replace(stopped.run, records=())
        give_back_memory()
        if measurement.failed or stopped is not None:
            self._check_server(server, measurement, gave_up=stopped is not None)
        if stopped is not None:
            from pytest_sglang.errors import MeasurementFailed

            raise _Interrupted(
                measurement,
                MeasurementFailed(
                    "\n".join(
                        [
                            f"the measurement of {server.name} @ C={concurrency} ({server.url}) "
                            f"was stopped in run {repeat + 1}: {stopped}",
                            *failure_kinds([measurement]),
                            "  the server still accepts connections, but left that many "
                            "requests in a row without an answer: read its log (a hung "
                            "scheduler? streams that stall?)",
                        ]
                    )
                ),
            )
        return measurement

    def _check_server(
        self, server: SGLangServer, measurement: Measurement, *, gave_up: bool = False
    ) -> None:
        """Fail the test naming the server's death if it died under the load."""
        __tracebackhide__ = True
        # A run that gave up, or whose last requests all failed, looks like a death: give a
        # dying process a moment to be reaped. Scattered failures (an error rate) do not.
        tail = measurement.records[-5:]
        wait = 2.0 if gave_up or (tail and all(not r.ok for r in tail)) else 0.0
        died = self.pool.check(server.name, during=self._during, wait=wait)
        if died is None:
            return
        self._server_failed(server.name, died)
        from pytest_sglang.errors import ServerDied

        raise _Interrupted(
            measurement,
            ServerDied(
                f"{died}\n  the measurement ({server.name} C={measurement.concurrency}, run "
                f"{measurement.repeat + 1}) lost {measurement.failed} of "
                f"{measurement.requests} requests to it",
                phase=died.phase,
                exit_code=died.exit_code,
            ),
        )


class _GpuTelemetry:
    """The session's GPU telemetry reader (or why there is none), made on first use."""

    def __init__(self, pool: ServerPool) -> None:
        self.pool = pool
        self._reader: TelemetryReader | None = None
        self._tried = False

    def sampler(self, server: SGLangServer) -> TelemetrySampler | None:
        """Return a sampler of ``server``'s GPUs for one run, or None where none is read."""
        from pytest_sglang.errors import GpuUnavailable
        from pytest_sglang.gpu.telemetry import TelemetrySampler, make_reader

        settings = self.pool.settings
        if not self._tried:
            self._tried = True
            # The emulator holds no GPU unless it simulates them in a fake directory.
            emulated = settings.launcher.value == "emulator" and settings.gpu_fake.value is None
            if not emulated or settings.servers:
                try:
                    self._reader = make_reader(
                        host=settings.gpu_host.value, fake_dir=settings.gpu_fake.value
                    )
                except GpuUnavailable:
                    self._reader = None
        if self._reader is None:
            return None
        # A launched server's GPUs are known by UUID; an attached one's are all of them.
        uuids = tuple(server.launch.gpus) if server.launch is not None else ()
        pid = server.launch.pid if server.launch is not None else None
        pids = frozenset({pid}) if pid else frozenset()
        return TelemetrySampler(self._reader, uuids, allowed_pids=pids)


def _with_telemetry(measurement: Measurement, sampler: TelemetrySampler) -> Measurement:
    from pytest_sglang.measure.checks import telemetry_checks

    summary = sampler.summary()
    return dataclasses.replace(
        measurement,
        gpu_telemetry=summary.as_dict(measurement.output_tokens),
        checks=measurement.checks + telemetry_checks(summary),
    )


class _CounterScrapes:
    """The server's ``/metrics`` around a run's measured requests (when it serves them)."""

    def __init__(self, server: SGLangServer) -> None:
        self.server = server
        self._before: MetricsSnapshot | None = None

    def _scrape(self) -> MetricsSnapshot | None:
        import httpx

        from pytest_sglang.measure.server_metrics import scrape

        try:
            return scrape(self.server.url, self.server.headers)
        except (httpx.HTTPError, ValueError):
            return None  # no metrics: the client's figures stand alone

    def before(self) -> None:
        """Take the reading before the measured requests."""
        self._before = self._scrape()

    def delta(self) -> dict[str, Any] | None:
        """Return what the server counted since :meth:`before`, or None."""
        from pytest_sglang.measure.server_metrics import delta

        if self._before is None:
            return None
        after = self._scrape()
        if after is None:
            return None
        try:
            return delta(self._before, after).as_dict()
        except ValueError:
            return None  # restarted, or not SGLang's counters: nothing to say


def cut_by(error: BaseException) -> str:
    """Name what cut a measurement short: pytest-timeout, Ctrl-C, or the error's kind."""
    if isinstance(error, KeyboardInterrupt):  # the session handles SIGTERM as Ctrl-C
        return "an interrupt (KeyboardInterrupt: Ctrl-C or SIGTERM)"
    text = " ".join(str(error).split())
    if "pytest-timeout" in text:
        return f"the test's pytest-timeout ({text.rstrip('.')})"
    return f"{type(error).__name__}: {text[:200]}" if text else type(error).__name__


def _check_endpoint(server: SGLangServer, workload: Workload) -> None:
    """Refuse a native ``/generate`` workload on a server declared OpenAI-compatible."""
    if server.kind == "openai" and workload.endpoint == "generate":
        raise ValueError(
            f"{server.name} ({server.url}) is declared OpenAI-compatible: it has no SGLang "
            "/generate endpoint; measure it (and the SGLang servers it is compared with) with "
            'Workload(endpoint="completions") or Workload(endpoint="chat")'
        )


def load_generator_for(server: SGLangServer, **options: Any) -> LoadGenerator:
    """Return a load generator for a server that passed the readiness gate.

    The load generator knows URLs and headers, not servers: this hands it the server's base
    URL, its headers (the API key), its served model id and what is known of its connection
    habits (learned once per server and session). ``options`` are the other
    keyword arguments of :class:`~pytest_sglang.loadgen.runner.LoadGenerator`.
    """
    from pytest_sglang.loadgen.runner import LoadGenerator

    options.setdefault("connections", server.connections)
    return LoadGenerator(server.url, headers=server.headers, model=server.model.id, **options)
