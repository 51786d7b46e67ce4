"""The public face: at most 25 names listed once, each importable, documented and typed."""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import pytest_sglang

INIT = Path(pytest_sglang.__file__)
EXPORTS = pytest_sglang._EXPORTS
#: Issue 25's cap on the public names, ``__version__`` included.
MAX_PUBLIC_NAMES = 25


def test_the_type_checking_imports_are_the_exports_each_re_exported_as_itself() -> None:
    tree = ast.parse(INIT.read_text(encoding="utf-8"))
    block = next(
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    imports = [node for node in block.body if isinstance(node, ast.ImportFrom)]
    assert len(imports) == len(block.body), "the block holds imports only"
    assert all(alias.asname == alias.name for node in imports for alias in node.names)
    assert {alias.name: node.module for node in imports for alias in node.names} == EXPORTS
    assert sorted(pytest_sglang.__all__) == sorted([*EXPORTS, "__version__"])
    assert dir(pytest_sglang) == sorted(pytest_sglang.__all__)


def test_at_most_25_public_names() -> None:
    assert len(pytest_sglang.__all__) <= MAX_PUBLIC_NAMES, pytest_sglang.__all__


def test_every_exported_exception_is_an_sglang_error() -> None:
    from pytest_sglang.errors import SGLangError

    exceptions = [getattr(pytest_sglang, n) for n in EXPORTS if n[0].isupper()]
    exceptions = [e for e in exceptions if isinstance(e, type) and issubclass(e, BaseException)]
    assert SGLangError in exceptions and len(exceptions) <= 5
    assert all(issubclass(e, SGLangError) for e in exceptions)
    # The verdicts fail as assertions, so pytest shows them as failed asserts.
    assert issubclass(pytest_sglang.Inconclusive, AssertionError)
    assert issubclass(pytest_sglang.PerformanceAssertionError, AssertionError)


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_every_public_name_is_importable_documented_and_typed(name: str) -> None:
    obj = getattr(pytest_sglang, name)
    assert obj.__module__ == EXPORTS[name]
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


def test_the_public_names_load_from_a_zip_without_sources(tmp_path: Path) -> None:
    """A zipped or bytecode-only install has no source to read: the names must not need it."""
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for name in ("__init__.py", "_version.py", "errors.py"):
            zipped.write(INIT.parent / name, f"pytest_sglang/{name}")
    code = (
        f"import sys; sys.path.insert(0, {str(archive)!r}); import pytest_sglang; "
        "assert pytest_sglang.__file__.startswith(sys.path[0]), pytest_sglang.__file__; "
        "print(len(pytest_sglang.__all__), pytest_sglang.SGLangError.__name__)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(EXPORTS) + 1), "SGLangError"]


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
