"""``--emulator-gpu-dir``: the emulator registers as a GPU memory holder in a fake GPU directory."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_sglang.testing import EmulatorProcess

Start = Callable[..., EmulatorProcess]
UUIDS = ["GPU-fake0000", "GPU-fake0001", "GPU-fake0002"]


@pytest.fixture
def gpu_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "gpus"
    directory.mkdir()
    gpus = [
        {"uuid": u, "name": "NVIDIA H200", "total_mib": 143771, "base_used_mib": 0} for u in UUIDS
    ]
    (directory / "gpus.json").write_text(json.dumps({"gpus": gpus}))
    return directory


def holders(directory: Path) -> list[dict[str, object]]:
    return [json.loads(path.read_text()) for path in sorted(directory.glob("holder-*.json"))]


def test_holds_the_visible_gpus_while_running(start_emulator: Start, gpu_dir: Path) -> None:
    emulator = start_emulator(
        "--tp",
        "2",
        "--emulator-gpu-dir",
        str(gpu_dir),
        env={"CUDA_VISIBLE_DEVICES": f"{UUIDS[2]},{UUIDS[0]}"},
    )
    (holder,) = holders(gpu_dir)
    assert holder["pid"] == emulator.process.pid
    assert holder["gpus"] == [UUIDS[2], UUIDS[0]]
    assert holder["used_mib"] == int(143771 * 0.85)
    emulator.stop()
    assert holders(gpu_dir) == []


def test_indices_and_base_gpu_id(start_emulator: Start, gpu_dir: Path) -> None:
    start_emulator(
        "--base-gpu-id",
        "1",
        "--emulator-gpu-dir",
        str(gpu_dir),
        env={"CUDA_VISIBLE_DEVICES": "0,1,2"},
    )
    (holder,) = holders(gpu_dir)
    assert holder["gpus"] == [UUIDS[1]]


def test_a_directory_without_gpus_json_is_a_usage_error(
    start_emulator: Start, tmp_path: Path
) -> None:
    emulator = start_emulator("--emulator-gpu-dir", str(tmp_path), wait=None)
    assert emulator.process.wait(20) == 2
    assert "no gpus.json" in emulator.log()
