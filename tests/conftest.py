"""Fixtures shared by the plugin's own tests."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.emulator_process import EmulatorProcess, running_emulator


@pytest.fixture
def start_emulator(tmp_path: Path) -> Iterator[Callable[..., EmulatorProcess]]:
    """Start emulators as real processes; every one is stopped at teardown."""
    with contextlib.ExitStack() as stack:

        def start(*args: str, **kwargs: Any) -> EmulatorProcess:
            return stack.enter_context(running_emulator(tmp_path, *args, **kwargs))

        yield start
