"""The session's baseline gate: what it does when it cannot compare, read or save.

In-process pytester sessions whose tests record synthetic measurements the way
``sglang_bench`` does, against stores prepared by :class:`BaselineStore` (no server needed).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from pytest_sglang.measure.session_format import build_document, measurements_of
from pytest_sglang.measure.store import BaselineStore
from tests.bench_data import BASE_CONFIG, result

SUITE = """
from pytest_sglang.report.entries import record
from bench_data import BASE_CONFIG, result

def test_measure():
    r = result("baseline", [100.0, 100.5, 99.5, 100.2, 99.8], config=BASE_CONFIG)
    record({"record": "measurement", **r.as_dict()})
"""
FAIL = "--sglang-compare-fail=output_throughput:3%"
COMMIT = {"id": "abc123", "dirty": False}
MACHINE = {"node": "host"}


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_suite=SUITE)
    source = Path(__file__).parents[1].joinpath("bench_data.py").read_text()
    pytester.makepyfile(bench_data=source)
    return pytester


def _store(path: Path) -> BaselineStore:
    return BaselineStore(f"file://{path / 'store'}")


def _save(store: BaselineStore, name: str, **config: object) -> Path:
    body = result("baseline", [100.0, 100.4, 99.6, 100.1, 99.9],
                  config={**BASE_CONFIG, **config}).as_dict()  # fmt: skip
    row = {"test": "t::t", **body}
    return Path(store.save(name, build_document(name, [row], commit=COMMIT, machine=MACHINE)))  # type: ignore[list-item]


# -- item 4: a gate that compared nothing has not passed ------------------------------------


def test_compare_fail_with_every_comparison_refused_fails_the_session(
    suite: pytest.Pytester,
) -> None:
    store = _store(suite.path)
    _save(store, "other-tp", tp_size=4)  # nothing comparable: tp 4 stored, tp 8 measured
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={store.uri}",
                             "--sglang-compare", FAIL)  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines([
        "*[[]REFUSED[]]*tp_size: 8 (now) vs 4 (stored)*",
        "*the gate compared nothing*--sglang-compare-fail*nothing-compared:ok*",
    ])  # fmt: skip


def test_compare_fail_with_an_empty_store_fails_the_session(suite: pytest.Pytester) -> None:
    store = _store(suite.path)
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={store.uri}",
                             "--sglang-compare", FAIL)  # fmt: skip
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*[[]NO BASELINE[]]*", "*the gate compared nothing*"])


def test_nothing_compared_is_allowed_when_asked_for(suite: pytest.Pytester) -> None:
    store = _store(suite.path)
    _save(store, "other-tp", tp_size=4)
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={store.uri}", "--sglang-compare",
                             f"{FAIL},nothing-compared:ok")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*nothing was compared (allowed by nothing-compared:ok): 1 measurement(s) refused*"]
    )


def test_compare_fail_with_a_counterpart_passes(suite: pytest.Pytester) -> None:
    store = _store(suite.path)
    _save(store, "same")
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={store.uri}",
                             "--sglang-compare", FAIL)  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


# -- item 5: a damaged baseline is an error, never a fall-back ----------------------------


def test_a_truncated_latest_session_is_a_usage_error_naming_it(suite: pytest.Pytester) -> None:
    store = _store(suite.path)
    _save(store, "older")
    latest = _save(store, "latest")
    text = latest.read_text()
    latest.write_text(text[: len(text) // 2])
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={store.uri}", "--sglang-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    err = result.stderr.str()
    assert str(latest) in err and "not valid JSON" in err, err
    assert "Traceback" not in err
    result.stdout.no_fnmatch_line("*test_measure*")  # no test ran


# -- item 6: the storage is checked before the session starts -----------------------------


def _runs_nothing(result: pytest.RunResult) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stderr.str()
    result.stdout.no_fnmatch_line("*test_measure*")


def test_a_file_where_the_storage_folder_should_be(suite: pytest.Pytester) -> None:
    (suite.path / "store").write_text("not a folder")
    result = suite.runpytest("-p", "sglang", "-osglang_storage=file://store", "--sglang-save=x")
    _runs_nothing(result)
    result.stderr.fnmatch_lines(["*--sglang-save*cannot write to*store*sglang*"])


def test_an_unwritable_storage_folder(suite: pytest.Pytester) -> None:
    # /proc refuses new files even to root.
    result = suite.runpytest("-p", "sglang", "-osglang_storage=file:///proc/pytest-sglang-store",
                             "--sglang-save")  # fmt: skip
    _runs_nothing(result)
    result.stderr.fnmatch_lines(["*--sglang-save*cannot write to*/proc/pytest-sglang-store*"])


def test_a_save_name_the_store_refuses_is_a_usage_error_before_any_test(
    suite: pytest.Pytester,
) -> None:
    # Not found out at the end of a long session, when the save fails.
    result = suite.runpytest("-p", "sglang", "-osglang_storage=file://store", "--sglang-save=a b")
    _runs_nothing(result)
    result.stderr.fnmatch_lines(["*--sglang-save: cannot save under 'a b': use letters, digits*"])


def test_a_storage_uri_the_store_refuses_is_a_usage_error(suite: pytest.Pytester) -> None:
    # The session and the store apply one rule: elasticsearch+http[s]:// only.
    uri = "elasticsearch+httpx://user:pw@127.0.0.1/benchmarks/sglang"
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={uri}", "--sglang-save=x")
    _runs_nothing(result)
    result.stderr.fnmatch_lines(["*sglang_storage*'elasticsearch+httpx://***@127.0.0.1/*"
                                 "is not file://PATH or elasticsearch+http[[]s]://*"])  # fmt: skip
    assert "pw" not in result.stderr.str()


@pytest.mark.parametrize("option", ["--sglang-save=x", "--sglang-compare"])
def test_an_elasticsearch_that_does_not_answer(suite: pytest.Pytester, option: str) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"elasticsearch+http://user:pw@127.0.0.1:{port}/benchmarks/sglang?project_name=p"
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={uri}", option)
    _runs_nothing(result)
    flag = option.split("=")[0]
    result.stderr.fnmatch_lines([f"*{flag}*127.0.0.1:{port}*does not answer*"])
    assert "pw" not in result.stderr.str()  # the URL's password is never shown


LOSE_THE_FOLDER = """
import shutil
from pathlib import Path

def test_lose_the_storage():
    folder = Path("store") / "sglang"
    shutil.rmtree(folder)
    folder.write_text("the folder is gone")
"""


def test_a_save_that_fails_at_the_end_keeps_the_session(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_zz=LOSE_THE_FOLDER)
    result = suite.runpytest("-p", "sglang", "-osglang_storage=file://store",
                             "--sglang-save=night", "--sglang-report=out/report.json")  # fmt: skip
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out
    (kept,) = (suite.path / "out").glob("*night*.json")
    assert f"the session was written to {kept}" in out
    session = BaselineStore("file://elsewhere", base=suite.path).find(str(kept))
    assert [m.row["server"] for m in session.measurements] == ["baseline"]
    assert json.loads(kept.read_text())["benchmarks"]
    shutil.rmtree(suite.path / "store")


OPEN_LOOPS = """
from pytest_sglang.report.entries import record
from bench_data import BASE_CONFIG, result

def test_two_rates():
    for rate in (10.0, 20.0):  # one server, one workload, one cap: only the rate differs
        r = result("baseline", [100.0, 100.5, 99.5], config=BASE_CONFIG)
        record({"record": "measurement", **r.as_dict(), "rate": rate, "arrival": "poisson",
                "max_concurrency": 4})
"""


def test_open_loops_at_two_rates_are_both_saved(suite: pytest.Pytester) -> None:
    # The gate and the JSON report tell measurements apart by the same key: an open loop's
    # rate and arrival are part of it, so no finished measurement is dropped from the save.
    suite.makepyfile(test_suite=OPEN_LOOPS)
    store = _store(suite.path)
    result = suite.runpytest("-p", "sglang", f"-osglang_storage={store.uri}",
                             "--sglang-save=rates", "--sglang-report=r.json")  # fmt: skip
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    saved = json.loads(next(store.folder.rglob("*rates.json")).read_text())
    stored = measurements_of(saved, "rates")
    assert sorted(m.result.open_loop.rate for m in stored if m.result.open_loop) == [10.0, 20.0]
    reported = json.loads((suite.path / "r.json").read_text())["measurements"]
    assert sorted(m["rate"] for m in reported) == [10.0, 20.0]
