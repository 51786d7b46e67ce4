"""Importing the plugin must stay cheap: pytest imports it in every run of the environment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    "pytest_sglang.measure.bench",
    "pytest_sglang.measure.metrics",
    "pytest_sglang.verdicts.gate",
    "pytest_sglang.report.context",
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


def test_public_names_load_lazily() -> None:
    import pytest_sglang

    assert sorted(pytest_sglang.__all__) == pytest_sglang.__all__
    for name in pytest_sglang.__all__:
        assert getattr(pytest_sglang, name) is not None
    assert set(dir(pytest_sglang)) >= set(pytest_sglang.__all__)
