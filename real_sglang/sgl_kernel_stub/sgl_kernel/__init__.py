"""Import-time stand-in for ``sgl_kernel`` (pytest-sglang's real-SGLang CPU tier).

The real ``sgl_kernel`` (PyPI: ``sglang-kernel``) has no CPU build on PyPI, yet SGLang 0.5.23
imports eight names from it at module load when it runs on the CPU (``is_cpu()``; with
``SGLANG_USE_CPU_ENGINE=1 --device cpu``), with no ``ImportError`` fallback, so the server
cannot even start without them. This package provides exactly those eight names. Each is a
callable that raises ``NotImplementedError`` naming itself if it is ever called. Plain
serving never calls them: six are speculative-decoding ops, ``assign_req_to_token_pool_cpu``
is reached only from ``alloc_for_spec_decode``, and ``copy_all_layer_kv_cache_cpu`` only from
KV pools built with ``enable_kv_cache_copy=True``. real_sglang/smoke.py checks that none is
called while serving (calls are logged to ``$PYTEST_SGLANG_SGL_KERNEL_LOG``).

Nothing else is provided, on purpose: no module ``__getattr__`` and no submodules. SGLang
probes other parts of sgl_kernel inside ``try: ... except ImportError:`` and falls back when
they are missing (e.g. ``sgl_kernel.scalar_type`` in ``layers/quantization/utils.py``,
``sgl_kernel.allreduce`` in ``custom_all_reduce_ops.py``); a stand-in that answered every
name would defeat those fallbacks. A name that a different configuration needs fails loudly
at import (``cannot import name ... from 'sgl_kernel'``) instead of silently.

Where each name is imported (SGLang 0.5.23, all under ``if _is_cpu:``):

- ``copy_all_layer_kv_cache_cpu``: ``sglang/kernels/ops/kvcache/cache_move.py``
- ``assign_req_to_token_pool_cpu``: ``sglang/srt/mem_cache/allocation.py``
- speculative decoding (EAGLE cannot run in this tier): ``build_tree_kernel_efficient_cpu``,
  ``verify_tree_greedy_cpu``, ``assign_draft_cache_locs_contiguous_cpu``,
  ``assign_extend_cache_locs_cpu``, ``fill_accept_out_cache_loc_cpu``,
  ``fill_bonus_tokens_cpu`` (``sglang/kernels/ops/speculative/{spec_tree,cache_locs,eagle}.py``).

Installed by real_sglang/setup.sh as a plain copy into the tier venv's site-packages.
"""

from __future__ import annotations

from sgl_kernel._stub import CALLS as CALLS  # the stand-ins called in this process
from sgl_kernel._stub import not_implemented, record

#: Marks this package as the stand-in (setup.sh checks it is what the venv imports).
IS_PYTEST_SGLANG_STUB = True
__version__ = "0.0.0+pytest-sglang.stub"

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]

assign_draft_cache_locs_contiguous_cpu = not_implemented(
    "sgl_kernel.assign_draft_cache_locs_contiguous_cpu"
)
assign_extend_cache_locs_cpu = not_implemented("sgl_kernel.assign_extend_cache_locs_cpu")
assign_req_to_token_pool_cpu = not_implemented("sgl_kernel.assign_req_to_token_pool_cpu")
build_tree_kernel_efficient_cpu = not_implemented("sgl_kernel.build_tree_kernel_efficient_cpu")
copy_all_layer_kv_cache_cpu = not_implemented("sgl_kernel.copy_all_layer_kv_cache_cpu")
fill_accept_out_cache_loc_cpu = not_implemented("sgl_kernel.fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = not_implemented("sgl_kernel.fill_bonus_tokens_cpu")
verify_tree_greedy_cpu = not_implemented("sgl_kernel.verify_tree_greedy_cpu")

record("IMPORT")
