"""Importing the plugin must stay cheap: pytest imports it in every run of the environment."""

from __future__ import annotations

import json
import subprocess
import sys

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
    loaded = set(json.loads(out))
    pulled = [m for m in loaded for heavy in HEAVY if m == heavy or m.startswith(heavy + ".")]
    assert not pulled, f"importing the plugin imported {sorted(pulled)}"


def test_public_names_load_lazily() -> None:
    import pytest_sglang

    assert sorted(pytest_sglang.__all__) == pytest_sglang.__all__
    for name in pytest_sglang.__all__:
        assert getattr(pytest_sglang, name) is not None
    assert set(dir(pytest_sglang)) >= set(pytest_sglang.__all__)
