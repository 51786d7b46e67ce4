"""The false-pass-rate benchmark runs and reports (a smoke test at its minimum size)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "false_pass_rate.py"


def load(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("false_pass_rate", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve string annotations through sys.modules.
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


def test_runs_with_forty_trials(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert load(monkeypatch).main(["--trials", "40", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("false-pass rate") == 4
    assert "false-pass target met" in out


def test_refuses_fewer_than_forty_trials(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as info:
        load(monkeypatch).main(["--trials", "39"])
    assert info.value.code == 2
    assert "at least 40" in capsys.readouterr().err
