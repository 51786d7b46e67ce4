"""Helpers for the emulator's own tests: shared emulators, HTTP clients, schemas, SSE."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest

from pytest_sglang.testing import EAGLE3_FLAGS, EmulatorProcess, running_emulator

SCHEMAS = Path(__file__).resolve().parents[2] / "pytest_sglang" / "schemas"
MODEL = "emulated/Llama-3.1-8B-Instruct"
READY_LINE = "The server is fired up and ready to roll!"

Shared = Callable[..., EmulatorProcess]


@pytest.fixture(scope="session")
def shared_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shared]:
    """Emulators reused across tests that only read from them, one per distinct flag set."""
    started: dict[tuple[str, ...], EmulatorProcess] = {}
    with contextlib.ExitStack() as stack:

        def get(*flags: str) -> EmulatorProcess:
            if flags not in started:
                log_dir = tmp_path_factory.mktemp("shared-emulator")
                started[flags] = stack.enter_context(running_emulator(log_dir, *flags))
            return started[flags]

        yield get


# The configurations most tests read from.
DEFAULT_FLAGS = ("--context-length", "2048", "--enable-metrics")
SPEC_FLAGS = (*EAGLE3_FLAGS, "--enable-metrics")
OLD_FLAGS = ("--emulator-version", "0.5.5", "--speculative-algorithm", "EAGLE")


@pytest.fixture
def emulator(shared_emulator: Shared) -> EmulatorProcess:
    """A ready 0.5.23 emulator: context length 2048, metrics on."""
    return shared_emulator(*DEFAULT_FLAGS)


@pytest.fixture
def spec_emulator(shared_emulator: Shared) -> EmulatorProcess:
    """A ready 0.5.23 emulator with EAGLE3 (3 steps, top-k 1, 4 draft tokens)."""
    return shared_emulator(*SPEC_FLAGS)


@pytest.fixture
def old_emulator(shared_emulator: Shared) -> EmulatorProcess:
    """A ready emulator of the 0.5.5 surface, with EAGLE."""
    return shared_emulator(*OLD_FLAGS)


@contextlib.contextmanager
def client(
    emulator: EmulatorProcess, timeout: float = 30.0, **kwargs: Any
) -> Iterator[httpx.Client]:
    """An HTTP client for ``emulator`` that ignores proxy settings."""
    with httpx.Client(base_url=emulator.url, timeout=timeout, trust_env=False, **kwargs) as http:
        yield http


def schema_errors(name: str, instance: Any) -> list[jsonschema.ValidationError]:
    """Validate ``instance`` against the plugin's ``<name>.schema.json``; return the errors."""
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    return sorted(validator.iter_errors(instance), key=lambda error: list(error.absolute_path))


def sse_data(response: httpx.Response) -> list[str]:
    """The ``data:`` payloads of a server-sent event stream, in order."""
    payloads = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payloads.append(line[len("data: ") :])
        else:
            assert line == "", f"unexpected SSE line {line!r}"
    return payloads


def sse_json(response: httpx.Response) -> list[dict[str, Any]]:
    """The JSON events of a stream that must end with ``data: [DONE]``."""
    payloads = sse_data(response)
    assert payloads, "empty stream"
    assert payloads[-1] == "[DONE]"
    assert "[DONE]" not in payloads[:-1]
    return [json.loads(payload) for payload in payloads[:-1]]
