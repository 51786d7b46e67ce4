"""The two launch profiles: each server runs the configuration its profile asks for.

``pytest examples --sglang-launcher=emulator`` launches ``baseline`` then ``eagle3`` (one at
a time, each once, tests grouped by profile); on a GPU host drop the launcher option.
"""

from __future__ import annotations

import pytest

from pytest_sglang import GpuState, SGLangServer


@pytest.mark.sglang_profile("baseline")
def test_baseline_runs_without_speculation(sglang_server: SGLangServer) -> None:
    assert sglang_server.server_info["speculative_algorithm"] is None


@pytest.mark.sglang_profile("eagle3")
def test_eagle3_caps_running_requests_at_48(sglang_server: SGLangServer) -> None:
    # SGLang silently lowers max_running_requests to 48 under speculative decoding: a
    # comparison with the baseline above 48 concurrent requests is confounded.
    info = sglang_server.server_info
    assert info["speculative_algorithm"] == "EAGLE3"
    assert info["speculative_num_draft_tokens"] == 4
    assert info["max_running_requests"] == 48


@pytest.mark.sglang_profile("eagle3")
def test_eagle3_reports_acceptance_in_meta_info(sglang_server: SGLangServer) -> None:
    with sglang_server.client() as client:
        response = client.post(
            "/generate",
            json={
                "input_ids": list(range(1, 33)),
                "sampling_params": {"max_new_tokens": 64, "ignore_eos": True, "temperature": 0},
            },
        )
    meta = response.json()["meta_info"]
    # Acceptance length per request: completion tokens per verify step (> 1 when drafts land).
    assert meta["completion_tokens"] == 64
    assert meta["completion_tokens"] / meta["spec_verify_ct"] > 1.0


@pytest.mark.sglang_profile("baseline")
def test_server_gpus_were_clean_and_are_pinned(
    sglang_server: SGLangServer, sglang_gpu: GpuState
) -> None:
    # Skipped where GPU state cannot be read (no NVML): the launch's pre-flight checked the
    # GPUs were clean; the server runs on exactly the GPUs it was given, by UUID.
    snapshot = sglang_gpu.snapshot()
    if sglang_server.launch is None:
        pytest.skip("attached server: the plugin did not launch it")
    # Other users' processes on other GPUs are not our business: only the server's own.
    held = {p.gpu_uuid for p in snapshot.processes if p.pid == sglang_server.launch.pid}
    assert held <= set(sglang_server.launch.gpus)
