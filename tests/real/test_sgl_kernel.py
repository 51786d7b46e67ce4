"""The sgl_kernel stand-in's pure-torch ops, checked in the tier's venv (torch, sglang 0.5.23).

``check_kernels.py`` runs there once per session (one process, ~15-35 s: it imports SGLang's
Triton kernels under Triton's CPU interpreter) and reports each op; each op is a test here.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.real.realserver import REPO, Tier, real_env

pytestmark = pytest.mark.timeout(300)

#: The twelve ops SGLang 0.5.23's speculative decoding reaches on a CPU.
OPS = (
    "decode_attention_cpu",
    "extend_attention_cpu",
    "build_draft_decode_metadata_cpu",
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "verify_tree_greedy_cpu",
    "fill_bonus_tokens_cpu",
    "fill_accept_out_cache_loc_cpu",
    "copy_all_layer_kv_cache_cpu",
    "reconstruct_indices_from_tree_mask",
)


@pytest.fixture(scope="session")
def kernel_results(tier: Tier) -> dict[str, str]:
    """Run check_kernels.py with the tier's python; its verdict per op."""
    script = REPO / "real_sglang" / "check_kernels.py"
    done = subprocess.run(
        [str(tier.python), str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        env=real_env(),
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and lines, f"check_kernels.py failed:\n{done.stderr[-3000:]}"
    results: dict[str, str] = json.loads(lines[-1])
    return results


def test_every_op_is_checked(kernel_results: dict[str, str]) -> None:
    assert sorted(kernel_results) == sorted(OPS)


@pytest.mark.parametrize("op", OPS)
def test_op_matches_reference(kernel_results: dict[str, str], op: str) -> None:
    assert kernel_results.get(op) == "ok", kernel_results.get(op, "not checked")
