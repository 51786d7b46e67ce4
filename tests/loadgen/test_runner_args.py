"""Argument checks and configuration of the load generator (no server needed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sglang.loadgen.records import ConnectionHabits
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.runs import load_generator_for

W = Workload(input_len=4, output_len=4, requests=1)


@pytest.mark.parametrize("concurrency", [0, -1, 1.5, True])
def test_concurrency_must_be_a_positive_integer(concurrency: Any) -> None:
    with pytest.raises(ValueError, match="concurrency must be an integer >= 1"):
        LoadGenerator("http://127.0.0.1:9").run_closed_loop(W, concurrency)


def test_sweep_checks_every_level_before_running_any() -> None:
    with pytest.raises(ValueError, match="each concurrency must be an integer >= 1, got 0"):
        LoadGenerator("http://127.0.0.1:9").run_sweep(W, [1, 0])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 0.0}, "the request rate must be a finite number > 0"),
        ({"rate": 1.0, "arrival": "burst"}, "arrival must be one of"),
        ({"rate": 1.0, "max_concurrency": 0}, "max_concurrency must be an integer >= 1"),
    ],
)
def test_open_loop_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LoadGenerator("http://127.0.0.1:9").run_open_loop(W, **kwargs)


@pytest.mark.parametrize("name", ["request_timeout", "stall_timeout", "connect_timeout"])
def test_timeouts_must_be_positive(name: str) -> None:
    with pytest.raises(ValueError, match=f"{name} must be a number of seconds > 0"):
        options: dict[str, Any] = {name: 0}
        LoadGenerator("http://127.0.0.1:9", **options)


def test_load_generator_for_a_server_takes_url_headers_and_model() -> None:
    server = SimpleNamespace(
        url="http://h:1/",
        headers={"Authorization": "Bearer sk-x"},
        model=SimpleNamespace(id="org/model"),
        connections=ConnectionHabits(),
    )
    generator = load_generator_for(server, request_timeout=5)  # type: ignore[arg-type]
    assert (generator.url, generator.model, generator.request_timeout) == (
        "http://h:1",
        "org/model",
        5.0,
    )
    client = generator.client(3)
    assert client.headers["authorization"] == "Bearer sk-x"
    assert client.headers["accept-encoding"] == "identity"


def test_the_repr_shows_no_secret() -> None:
    # pytest -l prints the locals of a failing test: a generator among them.
    generator = LoadGenerator(
        "http://ci:url-password@gpu:30000",
        api_key="the-api-key",
        headers={"X-Token": "header-secret"},
    )
    shown = repr(generator)
    assert "LoadGenerator(" in shown
    for secret in ("url-password", "the-api-key", "header-secret"):
        assert secret not in shown
