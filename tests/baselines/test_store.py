"""The baseline store: fingerprints, pytest-benchmark files, atomic concurrent saves."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.options import DEFAULT_STORAGE
from pytest_sglang.measure.session_format import (
    DamagedSession,
    StoredMeasurement,
    build_document,
    find_counterpart,
    fingerprint_of,
    report_measurements,
    result_of,
)
from pytest_sglang.measure.store import MACHINE_ID, BaselineStore
from pytest_sglang.report.entries import MeasurementRow, ServerEntry
from tests.bench_data import BASE_CONFIG, result


def row(
    throughputs: list[float], *, server: str = "baseline", concurrency: int = 1, **kw: Any
) -> MeasurementRow:
    body = result(server, throughputs, concurrency=concurrency, **kw).as_dict()
    return {"test": "tests/test_x.py::test_perf", **body}


def server_entry(name: str = "baseline", gpus: list[str] | None = None) -> ServerEntry:
    return {
        "record": "server", "name": name, "url": "", "version": "0.5.23", "model": "org/model",
        "readiness": {}, "launch": {"gpus": gpus} if gpus is not None else None,
        "config": dict(BASE_CONFIG),
    }  # fmt: skip


COMMIT = {"id": "abc123", "dirty": False, "branch": "main"}
MACHINE = {"node": "host", "system": "Linux"}


def test_the_default_storage_is_pytest_benchmarks() -> None:
    assert DEFAULT_STORAGE == BaselineStore().uri == "file://./.benchmarks"


def test_fingerprint_fields_and_differences() -> None:
    a = fingerprint_of(row([100, 101, 99]), server_entry(gpus=["u1", "u2"]), ["H200", "H200"])
    assert a.fields["model"] == "org/model"
    assert a.fields["tp_size"] == 8
    assert a.fields["gpu_model"] == "H200"
    assert a.fields["gpu_count"] == 2
    assert a.fields["concurrency"] == 1
    assert a.fields["max_running_requests"] == 1024
    # The SGLang version is a label, not a fingerprint field.
    assert "version" not in a.fields
    other_config = {**BASE_CONFIG, "tp_size": 4, "version": "0.5.24"}
    b = fingerprint_of(row([100, 101, 99], config=other_config), None, [])
    assert a.differences(b, refused=True) == ["tp_size: 8 (now) vs 4 (stored)"]
    # unknown on one side: shown, not refused
    assert a.differences(b, refused=False) == [
        "gpu_model: 'H200' (now) vs None (stored)",
        "gpu_count: 2 (now) vs 0 (stored)",
    ]
    c = fingerprint_of(row([90, 91, 92], config={**BASE_CONFIG, "version": "0.5.24"}), None, [])
    assert a.differences(c, refused=True) == [] and a.key == c.key


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    store = BaselineStore(f"file://{tmp_path / 'store'}")
    rows = [row([100.0, 102.0, 98.0, 101.0, 99.0]), row([300.0, 310.0, 305.0], concurrency=4)]
    where = store.save(
        "qualified",
        build_document(
            "qualified", rows, [server_entry()], ["H200"], commit=COMMIT, machine=MACHINE
        ),
    )
    assert Path(where) == tmp_path / "store" / MACHINE_ID / "0001_qualified.json"
    (session,) = store.sessions()
    assert session.name == "qualified" and session.number == 1
    assert session.labels["sglang_version"] == "0.5.23"
    assert session.labels["commit"] == "abc123"
    stored = session.measurements[0]
    assert stored.result.values("output_throughput") == [100.0, 102.0, 98.0, 101.0, 99.0]
    assert result_of(stored.row).concurrency == 1
    assert store.find("latest") == session
    assert store.find("1").id == store.find("qualified").id == "sglang/0001_qualified"
    with pytest.raises(LookupError, match="0001_qualified"):
        store.find("nope")
    # The file is pytest-benchmark's format: one entry per saved metric, times in seconds.
    document = json.loads(Path(where).read_text())
    assert set(document) == {"machine_info", "commit_info", "benchmarks", "datetime", "version"}
    bench = document["benchmarks"][0]
    assert bench["stats"]["rounds"] == 5
    assert bench["stats"]["min"] == pytest.approx(1 / 102.0)
    values = [100.0, 102.0, 98.0, 101.0, 99.0]
    assert bench["stats"]["ops"] == pytest.approx(5 / sum(1 / v for v in values))


def test_counterpart_is_the_newest_match_and_mismatches_are_near_misses(tmp_path: Path) -> None:
    store = BaselineStore(str(tmp_path))
    store.save("one", build_document("one", [row([100, 101, 102])], commit=COMMIT, machine=MACHINE))
    store.save("two", build_document("two", [row([200, 201, 202])], commit=COMMIT, machine=MACHINE))
    other = {**BASE_CONFIG, "tp_size": 4}
    store.save(
        "three",
        build_document(
            "three", [row([300, 301, 302], config=other)], commit=COMMIT, machine=MACHINE
        ),
    )
    fp = fingerprint_of(row([1, 2, 3]))
    match, near = find_counterpart(fp, store.measurements())
    assert match is not None and match.session == "sglang/0002_two"
    assert [n.session for n in near] == ["sglang/0003_three"]
    match, _ = find_counterpart(fp, store.measurements("one"))
    assert match is not None and match.session == "sglang/0001_one"


def test_an_open_loop_is_the_counterpart_only_of_one_at_its_rate() -> None:
    closed = row([100, 101, 99], concurrency=4)
    slow = {**closed, "rate": 5.0, "arrival": "poisson", "max_concurrency": 4}
    fast = {**slow, "rate": 10.0}
    stored = [
        StoredMeasurement(r, fingerprint_of(r), f"sglang/000{n}_x", {})  # type: ignore[arg-type]
        for n, r in enumerate((closed, slow, fast), 1)
    ]
    fingerprint = fingerprint_of(fast)
    match, near = find_counterpart(fingerprint, stored[:2])
    assert match is None  # neither 5/s nor a closed loop at C=4 is a baseline for 10/s
    assert [n.session for n in near] == ["sglang/0002_x", "sglang/0001_x"]
    assert fingerprint.differences(near[0].fingerprint, refused=True) == [
        'open_loop: {"arrival": "poisson", "max_concurrency": 4, "rate": 10.0} (now) vs '
        '{"arrival": "poisson", "max_concurrency": 4, "rate": 5.0} (stored)'
    ]
    assert find_counterpart(fingerprint, stored)[0] is stored[2]
    assert "open_loop=" in fingerprint.describe()


def test_report_measurements(tmp_path: Path) -> None:
    document = {"environment": {"gpus": [], "sglang_versions": ["0.5.23"]}, "created": "now",
                "servers": [server_entry()], "measurements": [row([100, 101, 102])]}  # fmt: skip
    (stored,) = report_measurements(document, "r.json")
    assert stored.labels["sglang_version"] == "0.5.23"
    assert stored.result.median("output_throughput") == 101


def test_a_bad_save_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot save"):
        BaselineStore(str(tmp_path)).save(
            "a/b", build_document("a/b", [row([1, 2, 3])], commit=COMMIT, machine=MACHINE)
        )


# -- pytest-benchmark reads the store ------------------------------------------------------


def _pytest_benchmark(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_benchmark", *args], cwd=cwd, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip


def test_pytest_benchmark_list_and_compare_show_the_saved_measurements(tmp_path: Path) -> None:
    store = BaselineStore(DEFAULT_STORAGE, base=tmp_path)
    store.save(
        "released",
        build_document("released", [row([100.0, 101.0, 99.0])], commit=COMMIT, machine=MACHINE),
    )
    store.save(
        "candidate",
        build_document("candidate", [row([90.0, 91.0, 89.0])], commit=COMMIT, machine=MACHINE),
    )
    listed = _pytest_benchmark("list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "0001_released.json" in listed.stdout and "0002_candidate.json" in listed.stdout
    compared = _pytest_benchmark("compare", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    out = compared.stdout
    assert "output_throughput (seconds per output token; OPS = output tok/s)" in out
    assert "baseline C=1 output_throughput" in out
    assert "ttft.p50" not in out or "seconds" in out
    # OPS is the output throughput: ~100 and ~90 tok/s.
    assert "99.99" in out and "89.99" in out


# -- two writers at once ---------------------------------------------------------------------


def _save_many(path: str, tag: str, count: int, barrier: Any) -> None:
    store = BaselineStore(f"file://{path}")
    barrier.wait()
    for i in range(count):
        store.save(
            f"{tag}-{i}",
            build_document(
                f"{tag}-{i}", [row([100.0 + i, 101.0, 99.0])], commit=COMMIT, machine=MACHINE
            ),
        )


def test_two_processes_saving_at_once_both_land_intact(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    count = 10
    workers = [
        context.Process(target=_save_many, args=(str(tmp_path), tag, count, barrier))
        for tag in ("job-a", "job-b")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
        assert worker.exitcode == 0
    files = sorted((tmp_path / MACHINE_ID).glob("*.json"))
    assert len(files) == 2 * count, [f.name for f in files]
    numbers = sorted(int(f.name[:4]) for f in files)
    assert numbers == list(range(1, 2 * count + 1))
    for file in files:
        document = json.loads(file.read_text())  # every file whole
        assert document["benchmarks"]
    names = {s.name for s in BaselineStore(str(tmp_path)).sessions()}
    assert names == {f"job-{t}-{i}" for t in "ab" for i in range(count)}


# -- a damaged session is an error, never skipped ----------------------------------------


def _truncate(path: Path) -> None:
    text = path.read_text()
    path.write_text(text[: len(text) // 2])


def test_a_truncated_session_is_an_error_that_names_the_file(tmp_path: Path) -> None:
    store = BaselineStore(str(tmp_path))
    store.save(
        "older",
        build_document("older", [row([100.0, 101.0, 99.0])], commit=COMMIT, machine=MACHINE),
    )
    latest = Path(
        store.save(
            "latest",
            build_document("latest", [row([90.0, 91.0, 89.0])], commit=COMMIT, machine=MACHINE),
        )
    )
    _truncate(latest)
    for read in (store.sessions, lambda: store.find("latest"), store.measurements,
                 lambda: store.find("older"), lambda: store.find(str(latest))):  # fmt: skip
        with pytest.raises(DamagedSession) as info:
            read()
        assert str(latest) in str(info.value) and "not valid JSON" in str(info.value)
        assert "cut short?" in str(info.value)
        assert "repair it" in str(info.value)  # says how to fix it
    with pytest.raises(DamagedSession, match=f"move it out of {store.folder} to use the others"):
        store.sessions()
    # Listing shows it, marked, beside the healthy ones.
    listed = store.sessions(damaged=True)
    assert [(s.id, s.problem is not None) for s in listed] == [
        ("sglang/0001_older", False), ("sglang/0002_latest", True),
    ]  # fmt: skip


def test_a_session_whose_record_is_malformed_is_damaged(tmp_path: Path) -> None:
    store = BaselineStore(str(tmp_path))
    path = Path(
        store.save(
            "one",
            build_document("one", [row([100.0, 101.0, 99.0])], commit=COMMIT, machine=MACHINE),
        )
    )
    document = json.loads(path.read_text())
    del document["benchmarks"][0]["options"]["sglang"]["measurement"]
    path.write_text(json.dumps(document))
    with pytest.raises(DamagedSession, match=r"0001_one\.json.*measurement"):
        store.sessions()


def test_assert_no_regression_refuses_a_damaged_store(tmp_path: Path) -> None:
    from pytest_sglang.errors import ComparisonRefused
    from pytest_sglang.verdicts.regression import assert_no_regression

    store = BaselineStore(str(tmp_path))
    _truncate(
        Path(
            store.save(
                "one",
                build_document("one", [row([100.0, 101.0, 99.0])], commit=COMMIT, machine=MACHINE),
            )
        )
    )
    fresh = result("baseline", [100.0, 101.0, 99.0], config=BASE_CONFIG)
    with pytest.raises(ComparisonRefused, match=r"0001_one\.json"):
        assert_no_regression(fresh, storage=str(tmp_path))


@pytest.mark.parametrize(
    ("commit", "shown"),
    [("unversioned", "unversioned"), ("1a2b3c4d5e6f7a8b9c0d", "1a2b3c4d5e"), (None, None)],
)
def test_a_stored_label_cuts_only_a_commit_hash(commit: str | None, shown: str | None) -> None:
    from typing import cast

    from pytest_sglang.measure.session_format import Fingerprint, StoredMeasurement

    row = cast("MeasurementRow", {"server": "baseline", "concurrency": 4})
    labels = {"sglang_version": "0.5.23", "commit": commit}
    stored = StoredMeasurement(row, cast("Fingerprint", None), "sglang/0001_x", labels)
    label = stored.label()
    assert label.startswith("baseline @ C=4 from sglang/0001_x (SGLang 0.5.23")
    if shown is None:
        assert label.endswith("(SGLang 0.5.23)")
    else:
        assert label.endswith(f", {shown})")


class _PytestBenchmarkElasticsearch:
    """What pytest-benchmark's Elasticsearch storage does with what it is given (no server)."""

    def __init__(self, stored: list[tuple[str, dict[str, Any]]]) -> None:
        self.stored = stored

    def save(self, output_json: dict[str, Any], save: str) -> None:
        output_json.pop("benchmarks")  # as its save() does, before it indexes each
        raise ConnectionError("the host went away")

    def load(self) -> list[tuple[str, dict[str, Any]]]:
        return self.stored


def test_an_elasticsearch_save_that_fails_leaves_the_document_whole() -> None:
    store = BaselineStore("elasticsearch+http://127.0.0.1:9/bench/run?project_name=p")
    store.__dict__["_elasticsearch"] = _PytestBenchmarkElasticsearch([])
    document = build_document("one", [row([100.0, 101.0])], commit=COMMIT, machine=MACHINE)
    with pytest.raises(ConnectionError):
        store.save("one", document)
    assert len(document["benchmarks"]) > 0  # the gate writes it elsewhere: nothing is lost


def test_an_elasticsearch_project_s_plain_benchmarks_are_not_sessions_of_ours() -> None:
    ours = build_document("one", [row([100.0, 101.0])], commit=COMMIT, machine=MACHINE)
    theirs = {**ours, "benchmarks": [{"name": "test_sort", "options": {}, "stats": {}}]}
    store = BaselineStore("elasticsearch+http://127.0.0.1:9/bench/run?project_name=p")
    store.__dict__["_elasticsearch"] = _PytestBenchmarkElasticsearch(
        [("abc_1", ours), ("abc_2", theirs)]
    )
    assert [s.id for s in store.sessions()] == ["abc_1"]  # "latest" is ours, as with files
    assert store.find("latest").id == "abc_1"


def test_an_elasticsearch_store_never_names_its_password() -> None:
    store = BaselineStore("elasticsearch+https://ci:hunter2@es.example:9200/bench/run")
    assert "hunter2" not in str(store)
    assert str(store).endswith("@es.example:9200/bench/run")
