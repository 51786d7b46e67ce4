"""``sgl_kernel.speculative``: the op NGRAM speculation imports from it on a CPU.

Imported by ``sglang/kernels/ops/speculative/reconstruct_tree.py``.
"""

from __future__ import annotations

from sgl_kernel._spec_ops import reconstruct_indices_from_tree_mask as _reconstruct
from sgl_kernel._stub import logged

__all__ = ["reconstruct_indices_from_tree_mask"]

reconstruct_indices_from_tree_mask = logged(
    "sgl_kernel.speculative.reconstruct_indices_from_tree_mask", _reconstruct
)
