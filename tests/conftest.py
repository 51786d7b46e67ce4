"""Fixtures shared by the plugin's own tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Imported once for the whole session: httpx imports httpcore lazily, and pytester removes
# modules first imported inside an in-process run from sys.modules afterwards. A second
# import of httpcore would make httpx stop recognising its own transport errors.
import httpcore  # noqa: F401
import httpx  # noqa: F401
import pytest

from pytest_sglang.testing import EmulatorProcess, running_emulator


def _import_everything_once() -> None:
    """Import every module of the package (and the plotting stack) before any test runs.

    The same trap as httpcore's above, for our own lazily imported modules: a module first
    imported inside an in-process pytester run is dropped from ``sys.modules`` afterwards,
    and imported again later as a second copy. Objects of the first copy then escape the
    second's ``except`` clauses (a ``ServerStoppedAnswering`` caught as something else) and
    ``isinstance`` checks (matplotlib's, in the HTML report), depending on test order.
    """
    import importlib
    import pkgutil

    import pytest_sglang

    for info in pkgutil.walk_packages(pytest_sglang.__path__, "pytest_sglang."):
        if not info.name.endswith("__main__"):  # that one runs the emulator's command line
            importlib.import_module(info.name)
    with contextlib.suppress(ImportError):  # the report extra
        importlib.import_module("matplotlib.pyplot")
        importlib.import_module("matplotlib.figure")


_import_everything_once()


@pytest.fixture
def start_emulator(tmp_path: Path) -> Iterator[Callable[..., EmulatorProcess]]:
    """Start emulators as real processes; every one is stopped at teardown."""
    with contextlib.ExitStack() as stack:

        def start(*args: str, **kwargs: Any) -> EmulatorProcess:
            return stack.enter_context(running_emulator(tmp_path, *args, **kwargs))

        yield start


@pytest.fixture(autouse=True)
def _isolate_from_developer_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a developer's PYTEST_SGLANG_* / PYTEST_ADDOPTS out of inner pytester runs."""
    import os

    for name in list(os.environ):
        if name.startswith("PYTEST_SGLANG_"):
            monkeypatch.delenv(name)
    monkeypatch.delenv("PYTEST_ADDOPTS", raising=False)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's pytester, whose inner sessions run in file order unless a test asks.

    pytest-randomly (a test dependency: the order-independence tests use it) would shuffle
    every inner session; ``-p randomly`` on an inner command line turns it back on.
    pytest also words its short summary differently on a CI machine (``CI`` or
    ``BUILD_NUMBER`` set: failure messages are not cut to the terminal's width), so those
    are unset: the inner output is the same here and in CI.
    """
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:randomly")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    return pytester
