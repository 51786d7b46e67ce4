"""The public face: one export table, every name importable, documented and typed."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_sglang

INIT = Path(pytest_sglang.__file__)


def _type_checking_imports() -> dict[str, str]:
    """Return the names the ``TYPE_CHECKING`` block imports, with their modules."""
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
    )
    names = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names:
            # "X as X": an explicit re-export for type checkers.
            assert alias.asname == alias.name, f"{alias.name} is not re-exported as itself"
            names[alias.name] = node.module
    return names


def test_the_type_checking_imports_repeat_the_export_table() -> None:
    assert _type_checking_imports() == pytest_sglang._EXPORTS


def test_all_is_the_export_table() -> None:
    assert sorted(pytest_sglang.__all__) == sorted([*pytest_sglang._EXPORTS, "__version__"])


@pytest.mark.parametrize("name", sorted(pytest_sglang._EXPORTS))
def test_every_public_name_is_importable_documented_and_typed(name: str) -> None:
    obj = getattr(pytest_sglang, name)
    assert obj.__module__ == pytest_sglang._EXPORTS[name]
    assert inspect.getdoc(obj), f"{name} has no docstring"
    if inspect.isfunction(obj):
        hints = obj.__annotations__
        assert "return" in hints, f"{name} has no return annotation"


def test_unknown_names_raise_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        pytest_sglang.nope  # noqa: B018


def test_version_comes_from_a_module_that_imports_nothing_of_ours() -> None:
    source = (INIT.parent / "_version.py").read_text(encoding="utf-8")
    assert "pytest_sglang" not in source.split('"""', 2)[2]
    assert pytest_sglang.__version__ != ""


def test_importing_the_package_loads_no_public_module() -> None:
    code = (
        "import sys, pytest_sglang; "
        "print(sorted(m for m in sys.modules if m.startswith('pytest_sglang')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['pytest_sglang']"


def test_the_imported_package_is_the_installed_one() -> None:
    """CI installs the checkout (editable); the tests import that same package, not a copy."""
    from importlib.metadata import distribution

    dist = distribution("pytest-sglang")
    direct = json.loads(dist.read_text("direct_url.json") or "{}")
    here = INIT.parent.resolve()
    if direct.get("dir_info", {}).get("editable"):
        # An editable install points at a checkout: it must be the one under test.
        assert direct["url"] == here.parent.as_uri(), (direct, here)
    else:
        installed = Path(str(dist.locate_file("pytest_sglang"))).resolve()
        assert installed == here, (installed, here)
