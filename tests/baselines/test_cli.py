"""``pytest-sglang`` on stores with damaged sessions, and its exit codes."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from pytest_sglang.cli import DATA, MISUSE, OK, REGRESSION, main
from pytest_sglang.measure.session_format import build_document
from pytest_sglang.measure.store import BaselineStore
from tests.bench_data import BASE_CONFIG, result

COMMIT = {"id": "abc123", "dirty": False}
MACHINE = {"node": "host"}


def _save(store: BaselineStore, name: str, values: list[float], **config: object) -> Path:
    body = result("baseline", values, config={**BASE_CONFIG, **config}).as_dict()
    row = {"test": "t::t", **body}
    return Path(store.save(name, build_document(name, [row], commit=COMMIT, machine=MACHINE)))  # type: ignore[list-item]


def _cli(store: BaselineStore, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(["--storage", store.uri, *args], out), out.getvalue()


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[BaselineStore, Path]:
    store = BaselineStore(f"file://{tmp_path / 'store'}")
    _save(store, "older", [100.0, 100.5, 99.5, 100.2, 99.8])
    latest = _save(store, "latest", [100.0, 100.5, 99.5, 100.2, 99.8])
    text = latest.read_text()
    latest.write_text(text[: len(text) // 3])
    return store, latest


def test_exit_codes_are_distinct() -> None:
    assert len({OK, REGRESSION, MISUSE, DATA}) == 4


def test_list_shows_a_damaged_session_and_exits_with_the_data_code(
    damaged: tuple[BaselineStore, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    store, _ = damaged
    status, out = _cli(store, "list")
    assert status == DATA
    lines = out.splitlines()
    assert lines[0].startswith("sglang/0001_older")
    assert lines[1].startswith("sglang/0002_latest") and "DAMAGED" in lines[1]
    assert "not valid JSON" in lines[1]


@pytest.mark.parametrize(
    "args",
    [
        ("compare", "older", "latest"),
        ("compare", "1", "1"),
        ("report", "latest"),
        ("report", "latest", "--baseline", "older"),
        ("report", "{path}"),
    ],
)
def test_compare_and_report_on_a_damaged_session_name_it(
    damaged: tuple[BaselineStore, Path], capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    store, latest = damaged
    status, _ = _cli(store, *(a.format(path=latest) for a in args))
    err = capsys.readouterr().err
    assert status == DATA, err
    assert str(latest) in err and "not valid JSON" in err
    assert "Traceback" not in err


def test_a_damaged_json_report_is_a_data_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "r.json"
    report.write_text('{"format": "pytest-sglang-report", "measurements": [')
    store = BaselineStore(f"file://{tmp_path / 'store'}")
    status, _ = _cli(store, "report", str(report))
    err = capsys.readouterr().err
    assert status == DATA and str(report) in err and "not valid JSON" in err


def test_compare_with_nothing_comparable_is_allowed_when_asked_for(tmp_path: Path) -> None:
    store = BaselineStore(f"file://{tmp_path / 'store'}")
    _save(store, "tp4", [100.0, 100.5, 99.5, 100.2, 99.8], tp_size=4)
    _save(store, "tp8", [100.0, 100.5, 99.5, 100.2, 99.8])
    status, out = _cli(store, "compare", "tp4", "tp8")
    assert status == MISUSE and "nothing was compared" in out
    status, out = _cli(
        store, "compare", "tp4", "tp8", "--fail", "output_throughput:3%,nothing-compared:ok"
    )
    assert status == OK, out


@pytest.mark.parametrize(
    "args", [("compare", "tp4", "tp4"), ("report", "tp4", "--baseline", "tp4")], ids=str
)
def test_a_bad_regression_term_is_misuse_for_every_judging_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: tuple[str, ...]
) -> None:
    store = BaselineStore(f"file://{tmp_path / 'store'}")
    _save(store, "tp4", [100.0, 100.5, 99.5, 100.2, 99.8], tp_size=4)
    try:
        status, _ = _cli(store, *args, "--fail", "output_throughput:3%,bogus")
    except SystemExit as exc:  # argparse's own exit on a usage error
        status = int(str(exc.code))
    err = capsys.readouterr().err
    assert status == MISUSE, err
    assert "cannot parse 'bogus'" in err and "Traceback" not in err


@pytest.mark.parametrize("command", [("compare", "a", "b"), ("report", "b", "--baseline", "a")])
def test_compare_and_report_judge_at_the_alpha_given(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    store = BaselineStore(f"file://{tmp_path / 'store'}")
    for name in ("a", "b"):
        _save(store, name, [100.0, 100.5, 99.5, 100.2, 99.8])
    status, out = _cli(store, *command, "--alpha", "0.2")
    assert status == OK and "at alpha 0.2" in out


def test_merge_of_a_damaged_report_is_a_data_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cut-short shard report is named with what is wrong, as ``report`` and ``compare`` do."""
    report = tmp_path / "shard1.json"
    report.write_text('{"format": "pytest-sglang-report", "measurements": [')
    merged = tmp_path / "merged.json"
    status = main(["merge", str(merged), str(report)], io.StringIO())
    err = capsys.readouterr().err
    assert status == DATA, err
    assert f"{report} is damaged: not valid JSON" in err and "cut short?" in err
    assert "Traceback" not in err and not merged.exists()


@pytest.mark.parametrize("command", [("list",), ("compare", "a", "b"), ("report", "a")])
def test_a_bad_storage_uri_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], command: tuple[str, ...]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--storage", "ftp://host/store", *command], io.StringIO())
    err = capsys.readouterr().err
    assert exited.value.code == MISUSE, err
    assert "storage 'ftp://host/store' is not file://PATH" in err and "Traceback" not in err


def test_an_elasticsearch_uri_of_another_scheme_is_refused_as_the_session_refuses_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # One storage rule: elasticsearch+http:// or elasticsearch+https://, never another scheme.
    with pytest.raises(SystemExit) as exited:
        main(["--storage", "elasticsearch+ftp://es.example/i/d", "list"], io.StringIO())
    err = capsys.readouterr().err
    assert exited.value.code == MISUSE, err
    assert "storage 'elasticsearch+ftp://es.example/i/d' is not file://PATH" in err


def test_an_elasticsearch_storage_without_its_client_says_what_to_install(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for module in ("elasticsearch", "pytest_benchmark.storage.elasticsearch"):
        monkeypatch.setitem(sys.modules, module, None)  # an import of it fails
    uri = "elasticsearch+http://127.0.0.1:9/i/d?project_name=p"
    assert main(["--storage", uri, "list"], io.StringIO()) == MISUSE
    err = capsys.readouterr().err
    assert "pytest-sglang list: the Elasticsearch storage needs its client" in err
    assert "pip install elasticsearch" in err and "Traceback" not in err


def test_a_bad_storage_uri_is_refused_without_its_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--storage", "elastic+https://ci:hunter2-pw@es.example/i/d", "list"], io.StringIO())
    err = capsys.readouterr().err
    assert exited.value.code == MISUSE, err
    assert "'elastic+https://***@es.example/i/d' is not file://PATH" in err
    assert "hunter2-pw" not in err
