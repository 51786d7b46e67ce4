"""The stored-session file format: pytest-benchmark's, with each measurement's whole record.

The format, the fingerprint (what must match) and the labels (what is compared):
``docs/baselines.md``. An unreadable document is a :class:`DamagedSession`, never skipped, so
an older session is never silently taken for the latest.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pytest_sglang.errors import SGLangError
from pytest_sglang.loadgen.schedule import OpenLoop
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import Measurement
from pytest_sglang.measure.results import PERFORMANCE_FLAGS, BenchResult
from pytest_sglang.report.entries import REPORT_FORMAT, MeasurementRow, ServerEntry, run_values

__all__ = [
    "DamagedSession",
    "Fingerprint",
    "StoredMeasurement",
    "autosave_name",
    "build_document",
    "commit_info",
    "find_counterpart",
    "fingerprint_of",
    "measurements_of",
    "read_document",
    "report_measurements",
    "result_of",
    "server_for",
    "session_labels",
]

#: The format of the record carried in a throughput entry's ``options``.
RECORD_FORMAT = "pytest-sglang-baseline"
RECORD_VERSION = 1

#: Fields that may be unknown on one side (GPU names where no probe ran): shown, not refused.
SOFT_FIELDS = frozenset({"gpu_model", "gpu_count"})

#: What each measurement saves as pytest-benchmark entries: (metric, unit shown in the group).
#: Throughput is saved as seconds per output token, so pytest-benchmark's time columns hold.
SAVED_METRICS: tuple[tuple[str, str], ...] = (
    ("output_throughput", "seconds per output token; OPS = output tok/s"),
    ("ttft.p50", "seconds"),
    ("ttft.p99", "seconds"),
    ("itl.p50", "seconds"),
    ("tpot.p50", "seconds"),
    ("e2e_latency.p50", "seconds"),
)


class DamagedSession(SGLangError):
    """A stored session (or report) that cannot be read: the message names the file and why."""

    def __init__(self, path: Path | str, problem: str, *, folder: Path | None = None) -> None:
        fix = f"move it out of {folder} to use the others" if folder else "give another file"
        super().__init__(f"{path} is damaged: {problem}; repair it, or {fix}")
        self.problem = problem


def read_document(path: Path, *, folder: Path | None = None) -> dict[str, Any]:
    """Return the JSON object a session or report file holds (``folder``: the store's).

    :raises DamagedSession: unreadable, cut short (not valid JSON) or not a JSON object.
    """
    text = ""
    try:
        text = path.read_text(encoding="utf-8")
        document = json.loads(text)
    except UnicodeDecodeError as exc:
        problem = f"not UTF-8 text ({exc.reason} at byte {exc.start})"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    except json.JSONDecodeError as exc:
        early = exc.pos >= len(text.rstrip()) - 1  # the text ended where more was due
        hint = f" (it ends after {len(text.encode())} bytes: cut short?)" if early else ""
        problem = f"not valid JSON: {exc}{hint}"
    else:
        if isinstance(document, dict):
            return document
        problem = f"holds a JSON {type(document).__name__}, not an object"
    raise DamagedSession(path, problem, folder=folder)


def _show(value: Any) -> str:
    return json.dumps(value, sort_keys=True) if isinstance(value, dict | list) else repr(value)


@dataclass(frozen=True)
class Fingerprint:
    """What must match for two measurements' comparison to mean anything."""

    #: The fields in display order (:func:`fingerprint_of`'s); every one must match.
    fields: Mapping[str, Any]

    @property
    def key(self) -> str:
        """A short stable hash of the hard fields (the soft GPU fields left out)."""
        hard = {k: v for k, v in self.fields.items() if k not in SOFT_FIELDS}
        text = json.dumps(hard, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]

    def differences(self, stored: Fingerprint, *, refused: bool) -> list[str]:
        """Describe each field that differs from ``stored``'s: ``tp_size: 8 (now) vs 4 (stored)``.

        ``refused``: the fields that refuse the comparison; else the ones only shown (a soft
        field unknown on one side).
        """
        out = []
        for name in dict.fromkeys([*self.fields, *stored.fields]):  # every field, in order
            now, then = self.fields.get(name), stored.fields.get(name)
            hard = name not in SOFT_FIELDS or (now not in (None, 0) and then not in (None, 0))
            if now != then and hard == refused:
                out.append(f"{name}: {_show(now)} (now) vs {_show(then)} (stored)")
        return out

    def describe(self) -> str:
        """Return the fields on one line, e.g. ``model='m', tp_size=8, ...``."""
        return ", ".join(f"{k}={_show(v)}" for k, v in self.fields.items())


def fingerprint_of(
    row: Mapping[str, Any], server: ServerEntry | None = None, gpus: Sequence[str] = ()
) -> Fingerprint:
    """Return the fingerprint of a measurement row (``MeasurementBody`` or a stored record).

    ``server`` (its launch record names its GPUs) and ``gpus`` (the session's) may be unknown.
    """
    config: Mapping[str, Any] = row.get("config") or {}
    model = config.get("served_model_name") or config.get("model_path")
    if model is None and server is not None:
        model = server.get("model")
    launch = server.get("launch") if server is not None else None
    used = launch.get("gpus") if isinstance(launch, dict) else None
    workload = Workload.from_dict(row["workload"]).for_concurrency(int(row["concurrency"]))
    fields: dict[str, Any] = {
        "model": model,
        "tp_size": config.get("tp_size", 1),
        "dp_size": config.get("dp_size", 1),
        "gpu_model": ", ".join(sorted(set(gpus))) or None,
        "gpu_count": len(used) if isinstance(used, list) and used else len(gpus),
        "workload": workload.as_dict(),
        "concurrency": int(row["concurrency"]),
    }
    fields.update({k: config[k] for k in PERFORMANCE_FLAGS if k in config})
    if row.get("rate") is not None:  # an open loop: its load is the rate (only then a key)
        fields["open_loop"] = _open_loop(row).as_dict()
    return Fingerprint(fields)


def _open_loop(row: Mapping[str, Any]) -> OpenLoop:
    return OpenLoop(float(row["rate"]), row.get("arrival", "poisson"), row.get("max_concurrency"))


def result_of(row: Mapping[str, Any]) -> BenchResult:
    """Rebuild a :class:`BenchResult` from a measurement row (report or store)."""
    return BenchResult(
        server=str(row["server"]),
        workload=Workload.from_dict(row["workload"]),
        concurrency=int(row["concurrency"]),
        runs=tuple(Measurement.from_dict(run) for run in row["runs"]),
        config=dict(row.get("config") or {}),
        schedule=row.get("schedule", "blocks"),
        url=str(row.get("url", "")),
        open_loop=_open_loop(row) if row.get("rate") is not None else None,
    )


@dataclass(frozen=True)
class StoredMeasurement:
    """A measurement as a store (or a JSON report) holds it, with its session's labels."""

    row: MeasurementRow
    fingerprint: Fingerprint
    #: The session it belongs to (``sglang/0003_nightly``, or a report's path).
    session: str
    #: What the session is: SGLang version, commit, save name, time, plugin version.
    labels: Mapping[str, Any]

    @property
    def result(self) -> BenchResult:
        """The measurement as a :class:`BenchResult`, ready for the verdicts."""
        return result_of(self.row)

    def label(self) -> str:
        """Return e.g. ``baseline @ C=4 from sglang/0002_nightly (SGLang 0.5.23, 1a2b3c4)``."""
        version, commit = self.labels.get("sglang_version"), str(self.labels.get("commit") or "")
        if re.fullmatch(r"[0-9a-f]{11,40}", commit):
            commit = commit[:10]
        what = ", ".join(x for x in (f"SGLang {version}" if version else "", commit) if x)
        return f"{self.row['server']} @ C={self.row['concurrency']} from {self.session}" + (
            f" ({what})" if what else ""
        )


def autosave_name(commit: Mapping[str, Any]) -> str:
    """Return pytest-benchmark's autosave name: ``COMMIT_YYYYmmdd_HHMMSS[_uncommitted-changes]``."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y%m%d_%H%M%S")
    name = f"{str(commit.get('id') or 'unversioned')[:12]}_{now}"
    return name + ("_uncommitted-changes" if commit.get("dirty") else "")


def commit_info() -> dict[str, Any]:
    """Return the tested tree's commit as pytest-benchmark records it (``unversioned`` if none)."""
    try:
        from pytest_benchmark.utils import get_commit_info

        return dict(get_commit_info())  # type: ignore[no-untyped-call]
    except Exception as exc:  # no git, not a repository: the save still happens
        return {"id": "unversioned", "dirty": False, "error": str(exc)}


def _stats(values: Sequence[float]) -> dict[str, Any]:
    from pytest_benchmark.stats import Stats

    stats = Stats()  # type: ignore[no-untyped-call]
    for value in values:
        stats.update(value)  # type: ignore[no-untyped-call]
    out: dict[str, Any] = stats.as_dict()  # type: ignore[no-untyped-call]
    return out | {"data": list(values), "iterations": 1}


def benchmark_entries(
    row: MeasurementRow, fingerprint: Fingerprint, labels: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Return the pytest-benchmark entries of one measurement (see :data:`SAVED_METRICS`)."""
    w, server, level, key = row["workload"], row["server"], row["concurrency"], fingerprint.key
    title = f"{w['endpoint']} in={w['input_len']} out={w['output_len']} C={level}"
    runs = len(row["runs"])
    entries = []
    for metric, unit in SAVED_METRICS:
        values = [v for v in run_values(row["runs"], metric) if v > 0]
        if not values:
            continue
        options: dict[str, Any] = {"unit": unit}
        if metric == "output_throughput":
            values = [1.0 / v for v in values]
            options["sglang"] = {
                "format": RECORD_FORMAT,
                "version": RECORD_VERSION,
                "fingerprint": dict(fingerprint.fields),
                "fingerprint_key": key,
                "labels": dict(labels),
                "measurement": dict(row),
            }
        entries.append(
            {
                "group": f"{title}: {metric} ({unit})",
                "name": f"{server} C={level} {metric}",
                "fullname": f"{row.get('test') or 'session'}::{server}@C={level}:{key}::{metric}",
                "params": None,
                "param": None,
                "extra_info": {"metric": metric, "unit": unit, "fingerprint": key, "runs": runs},
                "options": options,
                "stats": _stats(values),
            }
        )
    return entries


def measurements_of(document: Mapping[str, Any], session: str) -> list[StoredMeasurement]:
    """Return the measurements of a saved session, or of a JSON report (``--sglang-report``).

    :raises ValueError: a record of ours that lacks what it must hold (says which).
    """
    if document.get("format") == REPORT_FORMAT:
        return report_measurements(document, session)
    out = []
    benchmarks = document.get("benchmarks", [])
    if not isinstance(benchmarks, list):
        raise ValueError("'benchmarks' is not a list")
    for index, bench in enumerate(benchmarks):
        options = bench.get("options") if isinstance(bench, dict) else None
        record = options.get("sglang") if isinstance(options, dict) else None
        if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
            continue
        sections = ("measurement", "fingerprint", "labels")
        missing = [k for k in sections if not isinstance(record.get(k), dict)]
        if not missing:
            needed = ("server", "workload", "concurrency", "runs")
            missing = [f"measurement.{k}" for k in needed if k not in record["measurement"]]
        if missing:
            raise ValueError(f"benchmarks[{index}].options.sglang lacks {', '.join(missing)}")
        row = cast("MeasurementRow", record["measurement"])
        out.append(
            StoredMeasurement(row, Fingerprint(record["fingerprint"]), session, record["labels"])
        )
    return out


def session_labels(
    name: str,
    servers: Sequence[ServerEntry],
    commit: Mapping[str, Any],
    when: str,
) -> dict[str, Any]:
    """Return what a saved session is: its name, SGLang versions, commit, time, plugin."""
    from pytest_sglang._version import plugin_version

    return {
        "name": name,
        "sglang_version": ", ".join(_versions(servers)) or None,
        "commit": commit.get("id"),
        "dirty": bool(commit.get("dirty")),
        "branch": commit.get("branch"),
        "datetime": when,
        "plugin_version": plugin_version(),
    }


def _versions(servers: Sequence[ServerEntry]) -> list[str]:
    return sorted({str(s["version"]) for s in servers if s.get("version")})


def server_for(row: Mapping[str, Any], servers: Sequence[ServerEntry]) -> ServerEntry | None:
    """Return the server entry a measurement was taken on (by name and URL), if known."""
    for server in servers:
        if server["name"] == row["server"] and server["url"] == row.get("url", server["url"]):
            return server
    return next((s for s in servers if s["name"] == row["server"]), None)


def build_document(
    name: str,
    rows: Sequence[MeasurementRow],
    servers: Sequence[ServerEntry] = (),
    gpus: Sequence[str] = (),
    *,
    commit: Mapping[str, Any],
    machine: Mapping[str, Any] | None = None,
    verdicts: Sequence[Mapping[str, Any]] = (),
    interrupted: bool = False,
) -> dict[str, Any]:
    """Return one session as a pytest-benchmark document (what a file holds).

    ``commit``: the tested tree's (:func:`commit_info`); ``machine``: pytest-benchmark's
    machine information unless given; ``verdicts`` ride along in ``machine_info.sglang`` for
    the report; ``interrupted`` marks every measurement's labels.
    """
    from pytest_benchmark import __version__ as benchmark_version
    from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info as machine_info

    when = datetime.datetime.now(datetime.UTC).isoformat()
    labels = session_labels(name, servers, commit, when)
    if interrupted:
        labels["interrupted"] = True
    machine = dict(machine_info() if machine is None else machine)  # type: ignore[no-untyped-call]
    machine["sglang"] = {
        "gpus": list(gpus),
        "plugin_version": labels["plugin_version"],
        "sglang_versions": _versions(servers),
        "servers": [dict(s) for s in servers],
        "verdicts": [dict(v) for v in verdicts],
    }
    benchmarks = []
    for row in rows:
        fp = fingerprint_of(row, server_for(row, servers), gpus)
        benchmarks += benchmark_entries(row, fp, labels)
    return {
        "machine_info": machine,
        "commit_info": dict(commit),
        "benchmarks": benchmarks,
        "datetime": when,
        "version": benchmark_version,
    }


def find_counterpart(
    fingerprint: Fingerprint, candidates: Sequence[StoredMeasurement]
) -> tuple[StoredMeasurement | None, list[StoredMeasurement]]:
    """Return the newest (last) candidate whose fingerprint matches, and the near misses.

    Near misses have the same workload and concurrency but differ in a field that must match.
    """
    match, near = None, []
    same = (fingerprint.fields.get("workload"), fingerprint.fields.get("concurrency"))
    for stored in reversed(candidates):
        theirs = stored.fingerprint.fields
        if not fingerprint.differences(stored.fingerprint, refused=True):
            match = match or stored
        elif (theirs.get("workload"), theirs.get("concurrency")) == same:
            near.append(stored)
    return match, near


def report_measurements(document: Mapping[str, Any], source: str) -> list[StoredMeasurement]:
    """Return the measurements of a JSON results report (``--sglang-report``) as stored ones."""
    servers = cast("list[ServerEntry]", document.get("servers", []))
    environment = document.get("environment", {})
    gpus = environment.get("gpus", [])
    labels = {
        "name": Path(source).name,
        "sglang_version": ", ".join(environment.get("sglang_versions", [])) or None,
        "commit": environment.get("commit"),
        "datetime": document.get("created"),
        "plugin_version": environment.get("plugin_version"),
    }
    return [
        StoredMeasurement(row, fingerprint_of(row, server_for(row, servers), gpus), source, labels)
        for row in cast("list[MeasurementRow]", document.get("measurements", []))
    ]
