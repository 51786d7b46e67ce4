"""Checks of the sgl_kernel stand-in's ops, run by the tier venv's python (torch, sglang).

``python check_kernels.py`` prints one JSON object: op name -> ``"ok"`` or the failure.
Each op is checked on a small case whose answer is written out by hand and, where SGLang's
wheel has a reference that runs on a CPU, against it on random cases: its Triton kernels under
Triton's interpreter (``TRITON_INTERPRET=1``, set before anything imports triton), its
torch-native attention (``TorchNativeAttnBackend._run_sdpa_forward_*``) and KV move
(``move_kv_cache_native``). tests/real/test_sgl_kernel.py runs it and asserts per op.
"""

# ruff: noqa: T201  (a script: it prints its result)
from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from typing import Any

os.environ["TRITON_INTERPRET"] = "1"
os.environ.setdefault("SGLANG_USE_CPU_ENGINE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import sgl_kernel
import sgl_kernel.speculative
import torch

CHECKS: dict[str, Callable[[], None]] = {}
GEN = torch.Generator().manual_seed(0)


def check(name: str) -> Callable[[Callable[[], None]], Callable[[], None]]:
    def register(fn: Callable[[], None]) -> Callable[[], None]:
        CHECKS[name] = fn
        return fn

    return register


def equal(got: Any, want: Any, what: str) -> None:
    got_t, want_t = torch.as_tensor(got), torch.as_tensor(want)
    if got_t.shape != want_t.shape or not torch.equal(got_t.long(), want_t.long()):
        raise AssertionError(f"{what}: got {got_t.tolist()}, want {want_t.tolist()}")


def table(rows: int = 4, width: int = 24) -> torch.Tensor:
    """Return a req_to_token table (int32) with distinct slot numbers."""
    return (torch.randperm(rows * width, generator=GEN)[: rows * width] + 1).view(rows, width).int()


@check("assign_extend_cache_locs_cpu")
def _extend_locs() -> None:
    r2t = torch.arange(40, dtype=torch.int32).view(4, 10)
    out = torch.full((5,), -1, dtype=torch.int64)
    sgl_kernel.assign_extend_cache_locs_cpu(
        torch.tensor([2, 0]), r2t, torch.tensor([3, 7]), torch.tensor([5, 10]), out, 10
    )
    equal(out, [23, 24, 7, 8, 9], "hand case")
    from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs

    r2t = table()
    rp = torch.tensor([3, 1, 2])
    start = torch.tensor([2, 0, 5])
    end = start + torch.tensor([4, 3, 1])
    got = torch.zeros(8, dtype=torch.int64)
    want = torch.zeros(8, dtype=torch.int64)
    sgl_kernel.assign_extend_cache_locs_cpu(rp, r2t, start, end, got, 24)
    assign_extend_cache_locs[(3,)](rp, r2t, start, end, want, 24, 4)
    equal(got, want, "vs Triton assign_extend_cache_locs")


@check("assign_req_to_token_pool_cpu")
def _req_to_token() -> None:
    r2t = torch.zeros(3, 6, dtype=torch.int32)
    sgl_kernel.assign_req_to_token_pool_cpu(
        torch.tensor([2, 0]),
        r2t,
        torch.tensor([1, 4], dtype=torch.int32),
        torch.tensor([3, 6], dtype=torch.int32),
        torch.tensor([11, 12, 13, 14]),
        6,
    )
    equal(r2t, [[0, 0, 0, 0, 13, 14], [0] * 6, [0, 11, 12, 0, 0, 0]], "hand case")
    from sglang.srt.mem_cache.allocation import assign_req_to_token_pool

    got, want = table(), table()
    want.copy_(got)
    rp = torch.tensor([0, 3, 2])
    start = torch.tensor([1, 5, 0], dtype=torch.int32)
    end = torch.tensor([4, 9, 2], dtype=torch.int32)
    locs = torch.arange(100, 109)
    sgl_kernel.assign_req_to_token_pool_cpu(rp, got, start, end, locs, 24)
    assign_req_to_token_pool[(3,)](rp, want, start, end, locs, 24, 4)
    equal(got, want, "vs Triton assign_req_to_token_pool")


@check("assign_draft_cache_locs_contiguous_cpu")
def _draft_locs() -> None:
    r2t = torch.arange(30, dtype=torch.int32).view(3, 10)
    out = torch.zeros(2 * 3, dtype=torch.int64)
    sgl_kernel.assign_draft_cache_locs_contiguous_cpu(
        torch.tensor([1, 2]), r2t, torch.tensor([4, 2]), out, 10, 1, 3
    )
    equal(out, [14, 15, 16, 22, 23, 24], "hand case")
    from sglang.kernels.ops.speculative.cache_locs import assign_draft_cache_locs_contiguous

    r2t = table(width=40)
    rp, seq = torch.tensor([2, 0, 3]), torch.tensor([5, 9, 1])
    got = torch.zeros(3 * 2 * 3, dtype=torch.int64)
    want = torch.zeros_like(got)
    sgl_kernel.assign_draft_cache_locs_contiguous_cpu(rp, r2t, seq, got, 40, 2, 3)
    assign_draft_cache_locs_contiguous[(3,)](
        rp, r2t, seq, want, 40, 2, 3, positions=None, mrope=None, BS=3
    )
    equal(got, want, "vs Triton assign_draft_cache_locs_contiguous")


@check("build_draft_decode_metadata_cpu")
def _draft_decode_metadata() -> None:
    r2t = torch.arange(40, dtype=torch.int32).view(2, 20)
    # request in row 1, 3 tokens, topk 2, 2 steps: candidate 0's draft slots are columns 3-4,
    # candidate 1's columns 5-6, placed right after the prefix in its own row.
    got = sgl_kernel.build_draft_decode_metadata_cpu(
        r2t, torch.tensor([1]), torch.tensor([3]), 2, 2, 20
    )
    assert got.dtype == torch.int32 and got.shape[0] == 2, (got.dtype, got.shape)
    equal(got[:, :5], [[20, 21, 22, 23, 24], [20, 21, 22, 25, 26]], "hand case")


@check("fill_bonus_tokens_cpu")
def _bonus() -> None:
    tokens = torch.tensor([[5, 6, 7, 8], [9, 10, -1, -1]], dtype=torch.int32)
    bonus = torch.zeros(2, dtype=torch.int32)
    sgl_kernel.fill_bonus_tokens_cpu(tokens, torch.tensor([3, 1], dtype=torch.int32), bonus, 4)
    equal(bonus, [7, 9], "hand case")
    from sglang.kernels.ops.speculative.eagle import fill_bonus_tokens

    tokens = torch.randint(0, 1000, (5, 4), generator=GEN, dtype=torch.int32)
    lens = torch.randint(1, 5, (5,), generator=GEN, dtype=torch.int32)
    got, want = torch.zeros(5, dtype=torch.int32), torch.zeros(5, dtype=torch.int32)
    sgl_kernel.fill_bonus_tokens_cpu(tokens, lens, got, 4)
    fill_bonus_tokens[(5,)](tokens, lens, want, 4)
    equal(got, want, "vs Triton fill_bonus_tokens")


@check("fill_accept_out_cache_loc_cpu")
def _accept_out() -> None:
    index = torch.tensor([[0, 2, -1], [3, -1, -1], [6, 7, 8]], dtype=torch.int32)
    locs = torch.arange(100, 109)
    got = torch.full((6,), -1, dtype=torch.int64)
    sgl_kernel.fill_accept_out_cache_loc_cpu(index, locs, got)
    equal(got, [100, 102, 103, 106, 107, 108], "hand case")
    from sglang.kernels.ops.speculative.eagle import fill_accept_out_cache_loc

    want = torch.full((6,), -1, dtype=torch.int64)
    fill_accept_out_cache_loc[(9,)](index, locs, want, 16)
    equal(got, want, "vs Triton fill_accept_out_cache_loc")


@check("copy_all_layer_kv_cache_cpu")
def _kv_copy() -> None:
    from sglang.srt.mem_cache.memory_pool import move_kv_cache_native

    ks = [torch.randn(16, 2, 4, generator=GEN).bfloat16() for _ in range(3)]
    vs = [torch.randn(16, 2, 4, generator=GEN).bfloat16() for _ in range(3)]
    want_k, want_v = [k.clone() for k in ks], [v.clone() for v in vs]
    tgt, src = torch.tensor([3, 9, 5]), torch.tensor([5, 1, 3])  # 5 is both read and written
    bufs = ks + vs
    ptrs = torch.tensor([b.data_ptr() for b in bufs], dtype=torch.uint64)
    strides = torch.tensor([b[0].nbytes for b in bufs], dtype=torch.int64)
    sgl_kernel.copy_all_layer_kv_cache_cpu(ptrs, strides, tgt, src)
    move_kv_cache_native(want_k, want_v, tgt, src)
    for got, want in zip(ks + vs, want_k + want_v, strict=True):
        if not torch.equal(got, want):
            raise AssertionError("copy_all_layer_kv_cache_cpu differs from move_kv_cache_native")
    if not torch.equal(ks[0][3], want_k[0][3]) or torch.equal(ks[0][3], ks[0][1]):
        raise AssertionError("hand case: row 5 must be read before it is overwritten")


def _tree_inputs() -> tuple[Any, ...]:
    # One request, topk 2, 2 steps (depth 2), 4 draft tokens + root: from SGLang's shapes.
    parent_list = torch.tensor([[-1, 0, 1]])
    selected_index = torch.tensor([[0, 1, 2, 5]])  # step-1 picks 0,1; step-2 picks 2 (child of
    # candidate 0 i.e. parent_list[1]=0 -> node 1) and 5 (5 // 2 = 2 -> parent_list[2]=1 -> node 2)
    seq = torch.tensor([7])
    return parent_list, selected_index, seq


@check("build_tree_kernel_efficient_cpu")
def _build_tree() -> None:
    from sglang.kernels.ops.speculative.spec_tree import sgl_build_tree_kernel_triton

    def run(fn: Callable[..., None], parent: Any, sel: Any, seq: Any, topk: int, depth: int) -> Any:
        bs, n = sel.shape[0], sel.shape[1] + 1
        mask = torch.ones(bs * n * n, dtype=torch.bool)
        pos = torch.zeros(bs * n, dtype=torch.int64)
        idx = torch.zeros(bs, n, dtype=torch.int64)
        nxt = torch.full((bs, n), -1, dtype=torch.int64)
        sib = torch.full((bs, n), -1, dtype=torch.int64)
        fn(parent, sel, seq, mask, pos, idx, nxt, sib, topk, depth, n, 1)
        return mask.view(bs, n, n).int(), pos, idx, nxt, sib

    parent, sel, seq = _tree_inputs()
    mask, pos, idx, nxt, sib = run(
        sgl_kernel.build_tree_kernel_efficient_cpu, parent, sel, seq, 2, 2
    )
    equal(nxt, [[1, 3, 4, -1, -1]], "hand case: first children")
    equal(sib, [[-1, 2, -1, -1, -1]], "hand case: siblings")
    equal(pos, [7, 8, 8, 9, 9], "hand case: positions")
    equal(idx, [[0, 1, 2, 3, 4]], "hand case: retrieve_index")
    want_mask = [
        [1, 0, 0, 0, 0],
        [1, 1, 0, 0, 0],
        [1, 0, 1, 0, 0],
        [1, 1, 0, 1, 0],
        [1, 0, 1, 0, 1],
    ]
    equal(mask, [want_mask], "hand case: mask")
    # Against the Triton reference: random trees, topk 1 chains and topk 2, two requests.
    for topk, steps in ((1, 3), (2, 3)):
        bs, n = 2, topk * steps - (topk - 1) if topk > 1 else steps + 1
        parents = torch.stack(
            [
                torch.cat(
                    [
                        torch.tensor([-1]),
                        torch.randperm(topk * topk * (steps - 1), generator=GEN)[
                            : topk * (steps - 1) + topk - 1
                        ],
                    ]
                )
                for _ in range(bs)
            ]
        )[:, : topk * (steps - 1) + 1]
        sels = torch.stack(
            [
                torch.randperm(topk + topk * topk * (steps - 1), generator=GEN)[: n - 1]
                .sort()
                .values
                for _ in range(bs)
            ]
        )
        seqs = torch.tensor([5, 11])
        got = run(sgl_kernel.build_tree_kernel_efficient_cpu, parents, sels, seqs, topk, steps)
        want = run(sgl_build_tree_kernel_triton, parents, sels, seqs, topk, steps)
        for name, a, b in zip(
            ("mask", "positions", "index", "next", "sibling"), got, want, strict=True
        ):
            equal(a, b, f"vs Triton sgl_build_tree_kernel_triton (topk {topk}): {name}")


@check("verify_tree_greedy_cpu")
def _verify() -> None:
    from sglang.kernels.ops.speculative.spec_tree import verify_tree_greedy_triton

    def run(fn: Callable[..., None], cand: Any, nxt: Any, sib: Any, target: Any, slots: int) -> Any:
        bs, n = cand.shape
        predicts = torch.zeros(bs * n, dtype=torch.int32)
        accept = torch.full((bs, slots), -1, dtype=torch.int32)
        num = torch.zeros(bs, dtype=torch.int32)
        index = torch.arange(bs * n).view(bs, n)
        fn(
            predicts=predicts,
            accept_index=accept,
            accept_token_num=num,
            candidates=cand,
            retrive_index=index,
            retrive_next_token=nxt,
            retrive_next_sibling=sib,
            target_predict=target,
        ) if fn is sgl_kernel.verify_tree_greedy_cpu else fn(
            predicts, accept, num, cand, index, nxt, sib, target
        )
        return predicts, accept, num

    # Chain root -> 1 -> 2 -> 3; the target agrees on nodes 1 and 2, not 3.
    cand = torch.tensor([[10, 11, 12, 13]])
    chain_next = torch.tensor([[1, 2, 3, -1]])
    no_sib = torch.full((1, 4), -1)
    target = torch.tensor([[11, 12, 99, 5]])
    predicts, accept, num = run(
        sgl_kernel.verify_tree_greedy_cpu, cand, chain_next, no_sib, target, 4
    )
    equal(predicts, [11, 12, 99, 0], "hand case: predicts")
    equal(accept, [[0, 1, 2, -1]], "hand case: accept_index")
    equal(num, [2], "hand case: accept_token_num")
    # Random trees (the second sibling is the match half the time), against Triton.
    for _ in range(5):
        bs, n = 3, 5
        cand = torch.randint(5, 9, (bs, n), generator=GEN)
        nxt = torch.tensor([[1, 3, 4, -1, -1]] * bs)
        sib = torch.tensor([[-1, 2, -1, -1, -1]] * bs)
        target = torch.randint(5, 9, (bs, n), generator=GEN)
        got = run(sgl_kernel.verify_tree_greedy_cpu, cand, nxt, sib, target, 3)
        want = run(verify_tree_greedy_triton, cand, nxt, sib, target, 3)
        for name, a, b in zip(
            ("predicts", "accept_index", "accept_token_num"), got, want, strict=True
        ):
            equal(a, b, f"vs Triton verify_tree_greedy: {name}")


@check("reconstruct_indices_from_tree_mask")
def _reconstruct() -> None:
    from sglang.kernels.ops.speculative.reconstruct_tree import (
        reconstruct_indices_from_tree_mask_triton,
    )

    def run(fn: Callable[..., None], mask: Any, seq: Any, n: int) -> Any:
        bs = seq.numel()
        pos = torch.zeros(bs * n, dtype=torch.int64)
        idx = torch.zeros(bs, n, dtype=torch.int64)
        nxt = torch.zeros(bs, n, dtype=torch.int64)
        sib = torch.zeros(bs, n, dtype=torch.int64)
        fn(mask, seq, pos, idx, nxt, sib, bs, n)
        return pos, idx, nxt, sib

    # Tree: 0 -> {1, 2}, 1 -> 3.
    anc = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    pos, _, nxt, sib = run(
        sgl_kernel.speculative.reconstruct_indices_from_tree_mask,
        anc.flatten(),
        torch.tensor([4]),
        4,
    )
    equal(pos, [4, 5, 5, 6], "hand case: positions")
    equal(nxt, [[1, 3, -1, -1]], "hand case: next_token")
    equal(sib, [[-1, 2, -1, -1]], "hand case: next_sibling")
    for _ in range(3):
        n, bs = 12, 2
        masks = []
        for _b in range(bs):
            parent = [-1] + [int(torch.randint(0, i, (1,), generator=GEN)) for i in range(1, n)]
            m = torch.eye(n, dtype=torch.bool)
            for i in range(1, n):
                m[i] |= m[parent[i]]
            masks.append(m.flatten())
        mask = torch.cat(masks)
        seq = torch.tensor([3, 17])
        got = run(sgl_kernel.speculative.reconstruct_indices_from_tree_mask, mask, seq, n)
        want = run(reconstruct_indices_from_tree_mask_triton, mask, seq, n)
        for name, a, b in zip(("positions", "index", "next", "sibling"), got, want, strict=True):
            equal(a, b, f"vs Triton reconstruct_indices_from_tree_mask_triton: {name}")


def _close(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    err = (got.float() - want.float()).abs().max().item()
    if err > 2e-2:
        raise AssertionError(f"{what}: max abs error {err:.4f}")


def _paged(heads: int, kv_heads: int, dim: int, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    k = torch.randn(slots, kv_heads, dim, generator=GEN).bfloat16()
    v = torch.randn(slots, kv_heads, dim, generator=GEN).bfloat16()
    return k, v


@check("decode_attention_cpu")
def _decode() -> None:
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    op = torch.ops.sgl_kernel.decode_attention_cpu
    # Hand case: one head, two keys; q.k = 0 for both -> the mean of the values.
    k = torch.zeros(4, 1, 2).bfloat16()
    v = torch.tensor([[[0.0, 0.0]], [[2.0, 4.0]], [[4.0, 8.0]], [[0.0, 0.0]]]).bfloat16()
    out = torch.zeros(1, 1, 2).bfloat16()
    r2t = torch.tensor([[1, 2, 0, 0]], dtype=torch.int32)
    logits = torch.zeros(1, 1, 8, 3)
    op(
        torch.ones(1, 1, 2).bfloat16(),
        k,
        v,
        1.0,
        1.0,
        out,
        None,
        None,
        torch.tensor([2]),
        logits,
        r2t,
        torch.tensor([0]),
        torch.tensor([2]),
        1.0,
        0.0,
        False,
        0,
        None,
        None,
    )
    _close(out, torch.tensor([[[3.0, 6.0]]]), "hand case")
    # Random GQA case (with the new token's K/V written at loc), against torch_native's SDPA.
    heads, kv_heads, dim, bs = 4, 2, 16, 3
    k, v = _paged(heads, kv_heads, dim, 64)
    r2t = table(4, 16)
    rp, seq = torch.tensor([2, 0, 3]), torch.tensor([5, 16, 1])
    loc = r2t[rp, seq - 1].long()
    key = torch.randn(bs, kv_heads, dim, generator=GEN).bfloat16()
    value = torch.randn(bs, kv_heads, dim, generator=GEN).bfloat16()
    q = torch.randn(bs, heads, dim, generator=GEN).bfloat16()
    got = torch.zeros(bs, heads, dim).bfloat16()
    kk, vv = k.clone(), v.clone()
    op(
        q,
        kk,
        vv,
        1.0,
        1.0,
        got,
        key,
        value,
        loc,
        torch.zeros(bs, heads, 8, dim + 1),
        r2t,
        rp,
        seq,
        dim**-0.5,
        0.0,
        False,
        0,
        None,
        None,
    )
    k[loc], v[loc] = key, value
    if not (torch.equal(kk, k) and torch.equal(vv, v)):
        raise AssertionError("key/value not stored at loc")
    want = torch.zeros(bs, heads, dim)
    TorchNativeAttnBackend._run_sdpa_forward_decode(
        None,
        q.float(),
        want,
        k.float(),
        v.float(),
        r2t,
        rp,
        seq,
        scaling=dim**-0.5,
        enable_gqa=True,
        causal=False,
    )
    _close(got, want.view(bs, heads, dim), "vs torch_native _run_sdpa_forward_decode")


@check("extend_attention_cpu")
def _extend() -> None:
    from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend

    op = torch.ops.sgl_kernel.extend_attention_cpu
    heads, kv_heads, dim = 4, 2, 16
    k, v = _paged(heads, kv_heads, dim, 64)
    r2t = table(4, 16)
    rp = torch.tensor([1, 3])
    seq = torch.tensor([9, 6])
    ext = torch.tensor([4, 6], dtype=torch.int32)  # the second request has no prefix
    start = torch.tensor([0, 4], dtype=torch.int32)
    rows = [
        r2t[r, s - e : s].long()
        for r, s, e in zip(rp.tolist(), seq.tolist(), ext.tolist(), strict=True)
    ]
    k_ext, v_ext = k[torch.cat(rows)], v[torch.cat(rows)]
    q = torch.randn(10, heads, dim, generator=GEN).bfloat16()
    got = torch.zeros(10, heads, dim).bfloat16()

    def extend(out: torch.Tensor, mask: torch.Tensor | None) -> None:
        # The 22 arguments as IntelAMXAttnBackend.forward_extend passes them (6: max extend).
        op(q, k_ext, v_ext, out, k, v, 1.0, 1.0, r2t, rp, seq, ext, start, 6, dim**-0.5, 0.0,
           False, 0, None, None, mask, True)  # fmt: skip

    extend(got, None)
    want = torch.zeros(10, heads, dim)
    TorchNativeAttnBackend._run_sdpa_forward_extend(
        None,
        q.float(),
        want,
        k.float(),
        v.float(),
        r2t,
        rp,
        seq,
        seq - ext.long(),
        ext.long(),
        scaling=dim**-0.5,
        enable_gqa=True,
        causal=True,
    )
    _close(got, want.view(10, heads, dim), "causal vs torch_native _run_sdpa_forward_extend")
    # A custom (tree) mask equal to the causal one gives the same; one hiding every extend
    # token but itself gives, for the no-prefix request's first row, just its own value.
    causal = [torch.ones(e, e, dtype=torch.bool).tril().flatten() for e in ext.tolist()]
    masked = torch.zeros(10, heads, dim).bfloat16()
    extend(masked, torch.cat(causal))
    _close(masked, got, "causal custom_mask vs is_causal")
    diag = torch.cat([torch.eye(e, dtype=torch.bool).flatten() for e in ext.tolist()])
    extend(masked, diag)
    _close(
        masked[4:], v_ext[4:].repeat_interleave(2, dim=1), "hand case: self-only mask, no prefix"
    )


def main() -> None:
    results: dict[str, str] = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=4)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
