"""Importing the plugin must stay cheap: pytest imports it in every run of the environment."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HEAVY = (
    "httpx", "httpx_aiohttp", "aiohttp", "orjson", "jsonschema", "pynvml", "psutil", "uvicorn",
    "starlette", "tomllib", "pytest_sglang.emulator", "pytest_sglang.loadgen.runner", "ray",
)  # fmt: skip

PROBE = """
import json, sys
import pytest_sglang.plugin, pytest_sglang
pytest_sglang.__version__
print(json.dumps(sorted(m for m in sys.modules)))
"""


def test_plugin_import_pulls_no_heavy_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], check=True, capture_output=True, text=True
    ).stdout
    pulled = _pulled(set(json.loads(out)), HEAVY)
    assert not pulled, f"importing the plugin imported {sorted(pulled)}"


COLLECT = """
import json, sys, pytest
pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", sys.argv[1]])
print(json.dumps(sorted(m for m in sys.modules)))
"""

#: What a session without tests, marked tests or baseline options never needs: imported on
#: first use (a server asked for, a ``sglang_measure`` marker, ``--sglang-compare``...).
NOT_AT_COLLECTION = (
    *HEAVY,
    "pytest_sglang.server",
    "pytest_sglang.loadgen",
    "pytest_sglang.measure",
    "pytest_sglang.verdicts.regression",
    # A session that sets nothing of ours: settings and reporters wait for their first use.
    "pytest_sglang.config.settings",
    "pytest_sglang.report.collector",
    "pytest_sglang.report.junit",
)


def _pulled(loaded: set[str], modules: tuple[str, ...]) -> list[str]:
    return sorted(m for m in loaded for name in modules if m == name or m.startswith(name + "."))


def test_collect_only_imports_only_what_collection_needs(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", COLLECT, str(tmp_path)],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout
    pulled = _pulled(set(json.loads(out.splitlines()[-1])), NOT_AT_COLLECTION)
    assert not pulled, f"pytest --collect-only imported {pulled}"


def test_a_session_that_sets_nothing_still_reports_its_verdicts(pytester: pytest.Pytester) -> None:
    # The reporters start at the first entry: JUnit gets the concise properties, not raw ones.
    pytester.makepyfile(bench_data=Path(__file__).parents[1].joinpath("bench_data.py").read_text())
    pytester.makepyfile(
        test_verdict="""
        from bench_data import result
        from pytest_sglang import assert_faster

        def test_faster():
            fast, slow = [200.0, 201, 202, 203, 204], [100.0, 101, 102, 103, 104]
            assert_faster(result("a", fast), result("b", slow))
        """
    )
    result = pytester.runpytest("--junitxml=j.xml", "-p", "no:randomly")
    result.assert_outcomes(passed=1)
    case = next(ET.parse(pytester.path / "j.xml").iter("testcase"))
    names = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert names.get("sglang.verdict") == "pass", names
    assert "sglang" not in names, names


def test_public_names_load_lazily() -> None:
    import pytest_sglang

    assert sorted(pytest_sglang.__all__) == pytest_sglang.__all__
    for name in pytest_sglang.__all__:
        assert getattr(pytest_sglang, name) is not None
    assert set(dir(pytest_sglang)) >= set(pytest_sglang.__all__)


@pytest.mark.parametrize("where", ["pyproject", "environment", "ini"])
def test_anything_of_ours_set_is_checked_at_startup(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # Settings resolve lazily only where nothing of ours is set: a mistake still stops pytest.
    if where == "pyproject":
        pytester.makepyprojecttoml("[tool.pytest-sglang.profiles.bad]\ntp = 2\n")
    elif where == "environment":
        monkeypatch.setenv("PYTEST_SGLANG_READY_TIMEOUT", "soon")
    else:
        pytester.makeini("[pytest]\nsglang_ready_timeout = soon\n")
    result = pytester.runpytest("--collect-only")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()


#: What a launched server's helper processes (the reaper and the log pump, each ``python -m
#: pytest_sglang.server.process``) never need: they start with every launch, beside it.
NOT_IN_HELPERS = ("asyncio", "ssl", "pytest", "pytest_sglang.loadgen.workload")


def test_the_server_helper_processes_import_no_load_generator() -> None:
    probe = "import json, sys, pytest_sglang.server.process; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    unneeded = (*(m for m in HEAVY if m != "psutil"), *NOT_IN_HELPERS)  # psutil: they use it
    pulled = _pulled(set(json.loads(out)), unneeded)
    assert not pulled, f"the server's helper processes import {pulled}"
