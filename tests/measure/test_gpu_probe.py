"""Which GPU reader a measurement's telemetry gets (``measure.runs._gpu_probe``)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import ServerUrl, Sourced
from pytest_sglang.measure import runs


def probe_for(settings: Settings) -> object:
    return runs._gpu_probe(SimpleNamespace(settings=settings))  # type: ignore[arg-type]


def test_only_launches_that_hold_no_gpu_make_no_gpu_reader(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    made: list[dict[str, Any]] = []
    monkeypatch.setattr("pytest_sglang.gpu.probes.make_probe", lambda **kw: made.append(kw))
    emulator = Sourced("emulator", "test")
    host = Sourced[str | None]("gpu-box", "test")  # read over ssh: a reader must not start
    assert probe_for(Settings(launcher=emulator, gpu_host=host)) is None
    assert made == []
    # An attached server, or fake GPUs, are read.
    attached = (ServerUrl("a", "http://127.0.0.1:1", "test"),)
    probe_for(Settings(attached, launcher=emulator, gpu_host=host))
    probe_for(Settings(launcher=emulator, gpu_fake=Sourced[Path | None](tmp_path, "test")))
    assert len(made) == 2
