"""The HTML qualification report: self-contained, and checked in a real headless Chromium."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.measure.session_format import build_document
from pytest_sglang.report.html import render_html
from pytest_sglang.verdicts.regression import regression_verdict
from tests.bench_data import BASE_CONFIG, SPEC_CONFIG, result

pytest.importorskip("matplotlib")

LEVELS = (1, 2, 5, 10)
#: Where the browser test also leaves its screenshot, for people to look at.
SCREENSHOT = Path(tempfile.gettempdir()) / "pytest-sglang-report-screenshot.png"


def _row(server: str, c: int, base: float, config: dict[str, Any], spread: float = 0.01) -> Any:
    values = [base * (1 + spread * k) for k in (-2, -1, 0, 1, 2)]
    ttft = [0.05 * c * (1 + spread * k) for k in (-2, -1, 0, 1, 2)]
    body = result(server, values, config=config, concurrency=c, ttft=ttft, tpot=0.01 * c).as_dict()
    return {"test": f"tests/test_perf.py::test_sweep[{server}]", **body}


def document() -> dict[str, Any]:
    measurements = [_row("baseline", c, 90.0 * c**0.8, BASE_CONFIG) for c in LEVELS]
    measurements += [_row("eagle3", c, 100.0 * c**0.6, SPEC_CONFIG) for c in LEVELS]
    stored = result("baseline", [v * 1.1 for v in (90.0, 90.9, 89.1, 90.5, 89.6)],
                    config=BASE_CONFIG)  # fmt: skip
    fresh = result("baseline", [90.0, 90.9, 89.1, 90.5, 89.6], config=BASE_CONFIG)
    regression = {"test": "tests/test_perf.py::test_regression",
                  **regression_verdict(fresh, stored).as_dict()}  # fmt: skip
    crossover = {"test": "tests/test_perf.py::test_crossover", "kind": "find_crossover",
                 "outcome": "finding", "metric": "output_throughput", "summary": "crossover at 5",
                 "warnings": [], "table": "level 5",
                 "evidence": {"spec": "eagle3", "base": "baseline",
                              "crossover": {"level": 5}}}  # fmt: skip
    launch = {"command": ["python", "-m", "sglang.launch_server", "--api-key", "s3cret",
                          "--tp", "8", "--hf-token=hf_xyz"], "gpus": ["GPU-1"]}  # fmt: skip
    return {
        "format": "pytest-sglang-report", "version": 1, "complete": True, "interrupted": False,
        "exit_status": 1, "created": "2026-10-01T10:00:00+00:00",
        "updated": "2026-10-01T10:30:00+00:00",
        "environment": {"plugin_version": "0.1.0", "python": "3.11.7", "pytest": "9.2.0",
                        "platform": "Linux", "sglang_versions": ["0.5.24"],
                        "gpus": ["NVIDIA H200"] * 8},
        "servers": [{"name": "baseline", "url": "http://h:30000", "version": "0.5.24",
                     "model": "org/model", "readiness": {"total": 612.3}, "launch": launch,
                     "config": BASE_CONFIG}],
        "measurements": measurements, "verdicts": [crossover, regression],
    }  # fmt: skip


def baselines() -> list[dict[str, Any]]:
    return [{**_row("baseline", c, 95.0 * c**0.8, BASE_CONFIG), "session": "sglang/0001_0.5.23"}
            for c in LEVELS]  # fmt: skip


def both_baselines() -> list[dict[str, Any]]:
    return baselines() + [
        {**_row("eagle3", c, 99.0 * c**0.6, SPEC_CONFIG), "session": "sglang/0001_0.5.23"}
        for c in LEVELS
    ]


def test_the_report_is_self_contained_and_complete() -> None:
    page = render_html(document(), baselines=baselines())
    assert page.count("<svg") == 2  # one workload: the concurrency panels and the Pareto view
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched
    assert "s3cret" not in page and "hf_xyz" not in page and "--api-key ***" in page
    assert "REGRESSION" in page and 'class="verdict fail"' in page
    assert "baseline (baseline sglang/0001_0.5.23)" in page
    assert "crossover eagle3/baseline C=5" in page
    for heading in ("Environment", "Servers", "Configurations", "Verdicts"):
        assert f"<h2>{heading}" in page
    # The same data gives the same bytes (no dates or random ids in the plots).
    assert render_html(document(), baselines=baselines()) == page


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("PYTEST_SGLANG_REQUIRE_BROWSER"):
            pytest.fail("chromium is required (PYTEST_SGLANG_REQUIRE_BROWSER) but not installed")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return found


def _browse(page: Path, tmp_path: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    argv = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr",
        "--v=0", "--virtual-time-budget=10000", "--window-size=1400,2600", *mode,
        page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def test_the_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    page.write_text(render_html(document(), baselines=both_baselines()))
    dom = _browse(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'data-plots-rendered="2"' in dom.stdout  # both plots laid out with their marks
    assert 'data-errors=""' in dom.stdout
    assert _console(dom.stderr) == []
    # The laid-out page: the regressed point ringed, each baseline in its server's colour.
    plots = dom.stdout.split("<svg")[1]
    assert ">regression</text>" in plots
    for label in ("baseline (baseline sglang/0001_0.5.23)", "eagle3 (baseline sglang/0001_0.5.23)"):
        assert f">{label}</text>" in plots
    dashed = set(re.findall(r"stroke-dasharray: [0-9.,]+; stroke-dashoffset: 0; stroke: (#\w+)",
                            plots))  # fmt: skip
    assert {"#1f77b4", "#ff7f0e"} <= dashed  # the stored lines of baseline and of eagle3
    shot = tmp_path / "report.png"
    done = _browse(page, tmp_path, f"--screenshot={shot}")
    assert done.returncode == 0 and shot.stat().st_size > 20_000
    assert _console(done.stderr) == []
    shutil.copyfile(shot, SCREENSHOT)


def test_the_browser_check_notices_errors(tmp_path: Path) -> None:
    broken = render_html(document()).replace("</body>", "<script>undefinedCall();</script>"
                                             '<img src="missing.png"></body>')  # fmt: skip
    page = tmp_path / "broken.html"
    page.write_text(broken)
    dom = _browse(page, tmp_path, "--dump-dom")
    assert "undefinedCall" in dom.stdout.split("data-errors=")[1][:300]
    assert "missing.png" in dom.stdout.split("data-errors=")[1][:400]


def test_the_markdown_summary_draws_throughput_against_concurrency() -> None:
    from pytest_sglang.report.summary import render_markdown

    text = render_markdown(document()["measurements"], [])
    chart = text.split("```mermaid\n")[1].split("```")[0]
    assert chart.startswith("xychart-beta")
    assert 'x-axis "concurrency" [1, 2, 5, 10]' in chart
    assert chart.count("    line [") == 2
    assert "_Lines in order: 1. baseline, 2. eagle3._" in text


# -- issue 23, item 9 -----------------------------------------------------------------------


def test_every_line_has_its_own_style_baselines_too() -> None:
    from pytest_sglang.report.plots import series_of, series_styles

    measurements = document()["measurements"]
    stored = both_baselines()
    series = series_of(measurements) + series_of(stored, baseline=True)
    styles = series_styles(series)
    assert len(set(styles)) == len(series) == 4  # no two lines look alike
    by_label = dict(zip([s.label for s in series], styles, strict=True))
    fresh, base = by_label["baseline"], by_label["baseline (baseline sglang/0001_0.5.23)"]
    assert base[0] == fresh[0] and base[1] != fresh[1]  # its server's colour, dashed
    assert by_label["eagle3 (baseline sglang/0001_0.5.23)"][1] == base[1]
    page = render_html(document(), baselines=stored)
    first = page.split("<svg")[1]
    for colour, _ in styles:
        assert f"stroke: {colour}" in first


def _slot_rows(server: str, scale: float, config: dict[str, Any]) -> list[dict[str, Any]]:
    from pytest_sglang.loadgen.workload import Workload

    per_slot = Workload(input_len=32, output_len=4, requests=2, requests_per_slot=2, warmup=0)
    return [{"test": "t.py::test_sweep",
             **result(server, [scale * c * (1 + 0.01 * k) for k in range(-2, 3)], config=config,
                      concurrency=c, workload=per_slot, tpot=0.01 * c).as_dict()}
            for c in LEVELS]  # fmt: skip


def test_regressed_points_are_ringed_with_requests_per_slot() -> None:
    from pytest_sglang.cli import compare_measurements
    from pytest_sglang.measure.session_format import report_measurements

    fresh = _slot_rows("baseline", 80.0, BASE_CONFIG)
    stored = _slot_rows("baseline", 100.0, BASE_CONFIG)
    as_stored = report_measurements({"measurements": stored}, "stored.json")
    as_fresh = report_measurements({"measurements": fresh}, "now.json")
    _, verdicts, _ = compare_measurements(as_stored, as_fresh)
    assert {v["outcome"] for v in verdicts} == {"fail"}
    page = render_html({**document(), "measurements": fresh, "verdicts": verdicts},
                       baselines=stored)  # fmt: skip
    concurrency_panels = page.split("<svg")[1]
    assert ">regression<" in concurrency_panels or "<!-- regression -->" in concurrency_panels


def _store_with_baseline(tmp_path: Path) -> Any:
    from pytest_sglang.measure.store import BaselineStore

    store = BaselineStore(f"file://{tmp_path / 'store'}")
    rows = [_row("baseline", c, 100.0 * c**0.8, BASE_CONFIG) for c in LEVELS]
    store.save("released", build_document("released", rows, commit={"id": "abc"}, machine={}))
    return store


def test_a_report_built_from_a_json_report_counts_each_verdict_once(tmp_path: Path) -> None:
    import io
    import json

    from pytest_sglang.cli import compare_measurements, main
    from pytest_sglang.config.redaction import Redactor
    from pytest_sglang.measure.session_format import report_measurements

    store = _store_with_baseline(tmp_path)
    fresh = [_row("baseline", c, 80.0 * c**0.8, BASE_CONFIG) for c in LEVELS]
    # The session that wrote the report judged itself against "released" (its gate).
    stored = list(store.find("released").measurements)
    now = {**document(), "measurements": fresh}
    _, verdicts, _ = compare_measurements(stored, report_measurements(now, "now"))
    assert len(verdicts) == len(LEVELS)
    report = tmp_path / "now.json"
    # As the session's reporter writes it: through the redaction rule.
    written = Redactor().json({**now, "verdicts": verdicts})
    report.write_text(json.dumps(written))
    out = tmp_path / "q.html"
    status = main(["--storage", store.uri, "report", str(report), "--baseline", "released",
                   "-o", str(out)], io.StringIO())  # fmt: skip
    assert status == 0
    page = out.read_text()
    assert page.count('<div class="verdict fail">') == len(LEVELS)
    assert f"<b>{len(LEVELS)} verdict(s) failed</b>" in page


def test_a_report_from_a_stored_session_shows_its_verdicts(tmp_path: Path) -> None:
    import io
    import json

    from pytest_sglang.cli import main

    store = _store_with_baseline(tmp_path)
    verdict = {
        "test": "tests/test_perf.py::test_crossover",
        "kind": "find_crossover",
        "outcome": "finding",
        "metric": "output_throughput",
        "summary": "crossover at 5",
        "warnings": [],
        "table": "level 5",
        "evidence": {"spec": "eagle3", "base": "baseline", "crossover": {"level": 5}},
    }
    rows = [_row("baseline", c, 100.0 * c**0.8, BASE_CONFIG) for c in LEVELS]
    store.save(
        "judged",
        build_document("judged", rows, commit={"id": "abc"}, machine={}, verdicts=[verdict]),
    )
    out = tmp_path / "q.html"
    assert main(["--storage", store.uri, "report", "judged", "-o", str(out)], io.StringIO()) == 0
    page = out.read_text()
    assert "crossover at 5" in page and "No verdicts" not in page
    # A session saved before verdicts were stored says so, not "No verdicts".
    (older,) = store.folder.glob("*_released.json")
    saved = json.loads(older.read_text())
    del saved["machine_info"]["sglang"]["verdicts"]
    older.write_text(json.dumps(saved))
    assert main(["--storage", store.uri, "report", "released", "-o", str(out)],
                io.StringIO()) == 0  # fmt: skip
    page = out.read_text()
    assert "No verdicts were recorded" not in page
    assert "saved without its verdicts" in page


def test_server_ready_times_are_rounded() -> None:
    page_doc = document()
    page_doc["servers"][0]["readiness"] = {"total": 4.846183736}
    page = render_html(page_doc)
    assert "4.846183736" not in page
    assert "<td>4.8</td>" in page or ">4.8<" in page


def test_an_open_loops_regression_rings_no_closed_loop_point() -> None:
    # The open loop's cap is its concurrency: a closed loop at that level is another load.
    from pytest_sglang.cli import compare_measurements
    from pytest_sglang.measure.session_format import report_measurements

    def open_loop(scale: float) -> dict[str, Any]:
        row = _row("baseline", 5, scale, BASE_CONFIG)
        return {**row, "rate": 10.0, "arrival": "constant", "max_concurrency": 5}

    as_stored = report_measurements({"measurements": [open_loop(100.0)]}, "stored.json")
    as_fresh = report_measurements({"measurements": [open_loop(80.0)]}, "now.json")
    _, verdicts, _ = compare_measurements(as_stored, as_fresh)
    assert [v["outcome"] for v in verdicts] == ["fail"]
    measurements = [*document()["measurements"], open_loop(80.0)]
    page = render_html({**document(), "measurements": measurements, "verdicts": verdicts})
    concurrency_panels = page.split("<svg")[1]
    assert "regression" not in concurrency_panels and "REGRESSION" in page
