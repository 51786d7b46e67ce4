"""Import-time stand-in for ``sgl_kernel`` (pytest-sglang's real-SGLang CPU tier).

It has pure-torch versions of the CPU ops SGLang 0.5.23 calls for speculative decoding.

The real ``sgl_kernel`` (PyPI: ``sglang-kernel``) has no CPU build on PyPI, yet SGLang 0.5.23
imports eight names from it at module load when it runs on the CPU (``is_cpu()``; with
``SGLANG_USE_CPU_ENGINE=1 --device cpu``), with no ``ImportError`` fallback, so the server
cannot even start without them. Plain serving (``--attention-backend torch_native``) calls
none of them. Speculative decoding (NGRAM, STANDALONE, EAGLE/EAGLE3) needs SGLang's
``intel_amx`` attention backend and calls twelve ops in all; this package implements them in
pure torch from the semantics of SGLang's own Triton/torch kernels (``_spec_ops``,
``_attention``), see real_sglang/README.md:

- torch ops ``torch.ops.sgl_kernel.decode_attention_cpu`` / ``extend_attention_cpu``
  (registered on import; looked up by ``IntelAMXAttnBackend``);
- ``build_draft_decode_metadata_cpu`` (the multi-step draft backend);
- the eight names imported at module load: ``copy_all_layer_kv_cache_cpu``
  (``kernels/ops/kvcache/cache_move.py``), ``assign_req_to_token_pool_cpu``
  (``srt/mem_cache/allocation.py``), ``build_tree_kernel_efficient_cpu``,
  ``verify_tree_greedy_cpu``, ``assign_draft_cache_locs_contiguous_cpu``,
  ``assign_extend_cache_locs_cpu``, ``fill_accept_out_cache_loc_cpu``,
  ``fill_bonus_tokens_cpu`` (``kernels/ops/speculative/{spec_tree,cache_locs,eagle}.py``);
- submodule ``sgl_kernel.speculative`` with ``reconstruct_indices_from_tree_mask`` (NGRAM).

Nothing else is provided, on purpose: no module ``__getattr__``. SGLang probes other parts of
sgl_kernel inside ``try: ... except ImportError:`` and falls back when they are missing (e.g.
``sgl_kernel.scalar_type``, ``sgl_kernel.allreduce``); a stand-in that answered every name
would defeat those fallbacks. And no ``torch.ops.sgl_kernel.convert_weight_packed``: SGLang
takes its existence (with AMX tiles) as the sign of an AMX build and would then call AMX-only
ops. The first call of each op in a process is logged (``$PYTEST_SGLANG_SGL_KERNEL_LOG``).

Installed by real_sglang/setup.sh as a plain copy into the tier venv's site-packages.
"""

from __future__ import annotations

from sgl_kernel import _attention, _spec_ops
from sgl_kernel._stub import CALLS as CALLS  # the ops called in this process (first calls)
from sgl_kernel._stub import logged, record

#: Marks this package as the stand-in (setup.sh checks it is what the venv imports).
IS_PYTEST_SGLANG_STUB = True
__version__ = "0.1.0+pytest-sglang.stub"

__all__ = [
    "assign_draft_cache_locs_contiguous_cpu",
    "assign_extend_cache_locs_cpu",
    "assign_req_to_token_pool_cpu",
    "build_draft_decode_metadata_cpu",
    "build_tree_kernel_efficient_cpu",
    "copy_all_layer_kv_cache_cpu",
    "fill_accept_out_cache_loc_cpu",
    "fill_bonus_tokens_cpu",
    "verify_tree_greedy_cpu",
]

assign_draft_cache_locs_contiguous_cpu = logged(
    "sgl_kernel.assign_draft_cache_locs_contiguous_cpu",
    _spec_ops.assign_draft_cache_locs_contiguous_cpu,
)
assign_extend_cache_locs_cpu = logged(
    "sgl_kernel.assign_extend_cache_locs_cpu", _spec_ops.assign_extend_cache_locs_cpu
)
assign_req_to_token_pool_cpu = logged(
    "sgl_kernel.assign_req_to_token_pool_cpu", _spec_ops.assign_req_to_token_pool_cpu
)
build_draft_decode_metadata_cpu = logged(
    "sgl_kernel.build_draft_decode_metadata_cpu", _spec_ops.build_draft_decode_metadata_cpu
)
build_tree_kernel_efficient_cpu = logged(
    "sgl_kernel.build_tree_kernel_efficient_cpu", _spec_ops.build_tree_kernel_efficient_cpu
)
copy_all_layer_kv_cache_cpu = logged(
    "sgl_kernel.copy_all_layer_kv_cache_cpu", _spec_ops.copy_all_layer_kv_cache_cpu
)
fill_accept_out_cache_loc_cpu = logged(
    "sgl_kernel.fill_accept_out_cache_loc_cpu", _spec_ops.fill_accept_out_cache_loc_cpu
)
fill_bonus_tokens_cpu = logged("sgl_kernel.fill_bonus_tokens_cpu", _spec_ops.fill_bonus_tokens_cpu)
verify_tree_greedy_cpu = logged(
    "sgl_kernel.verify_tree_greedy_cpu", _spec_ops.verify_tree_greedy_cpu
)

_attention.register(logged)
record("IMPORT")
