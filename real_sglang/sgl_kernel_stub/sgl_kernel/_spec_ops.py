"""Pure-torch versions of the ``sgl_kernel`` CPU ops of speculative decoding.

The ops SGLang 0.5.23's speculative decoding reaches on a CPU (NGRAM, STANDALONE,
EAGLE/EAGLE3), written from the semantics of SGLang's own Triton/torch kernels of the
same names (paths relative to the wheel's ``sglang/``):

- cache locations: ``kernels/ops/speculative/cache_locs.py``
  (``assign_draft_cache_locs_contiguous``, ``assign_extend_cache_locs``,
  ``generate_draft_decode_kv_indices``),
  ``srt/mem_cache/allocation.py`` (``assign_req_to_token_pool``),
  ``kernels/ops/speculative/eagle.py`` (``fill_bonus_tokens``, ``fill_accept_out_cache_loc``);
- the draft tree: ``kernels/ops/speculative/spec_tree.py``
  (``sgl_build_tree_kernel_efficient_triton``, ``verify_tree_greedy_kernel_triton``),
  ``kernels/ops/speculative/reconstruct_tree.py`` (NGRAM's tree from its mask);
- the KV move: ``kernels/ops/kvcache/cache_move.py`` (``copy_all_layer_kv_cache_tiled``).

Every op writes its outputs in place (the arguments the caller pre-allocated), casting to the
output's dtype: SGLang mixes int32 and int64 index tensors between callers. Shapes and callers:
``docs``-level notes in real_sglang/README.md.
"""

from __future__ import annotations

import ctypes

import torch


def _lens(start: torch.Tensor, end: torch.Tensor) -> torch.Tensor:
    return (end.long() - start.long()).clamp_min(0)


def _ragged_columns(
    rows: torch.Tensor, start: torch.Tensor, lens: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Index pairs of ragged row slices.

    (row, column) index pairs of the ragged slices ``[start_b, start_b + lens_b)`` of each
    row ``rows[b]``, concatenated in batch order.
    """
    total = int(lens.sum())
    batch = torch.repeat_interleave(torch.arange(lens.numel()), lens, output_size=total)
    offsets = torch.cumsum(lens, 0) - lens
    within = torch.arange(total) - offsets[batch]
    return rows.long()[batch], start.long()[batch] + within


def assign_extend_cache_locs_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """``out_cache_loc`` := the slices ``req_to_token[rp_b, start_b:end_b]``, concatenated."""
    lens = _lens(start_offset, end_offset)
    rows, cols = _ragged_columns(req_pool_indices, start_offset, lens)
    out_cache_loc[: rows.numel()] = req_to_token[rows, cols].to(out_cache_loc.dtype)


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write slot numbers into the request table.

    ``req_to_token[rp_b, start_b:end_b]`` := the next ``end_b - start_b`` entries of
    ``out_cache_loc`` (the inverse of :func:`assign_extend_cache_locs_cpu`).
    """
    lens = _lens(start_offset, end_offset)
    rows, cols = _ragged_columns(req_pool_indices, start_offset, lens)
    req_to_token[rows, cols] = out_cache_loc[: rows.numel()].to(req_to_token.dtype)


def assign_draft_cache_locs_contiguous_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
    topk: int,
    num_cols: int,
) -> None:
    """Gather every request's draft slots.

    ``out_cache_loc[b*m:(b+1)*m]`` := ``req_to_token[rp_b, seq_len_b : seq_len_b + m]``,
    ``m = topk * num_cols`` (every draft slot of request b, reserved after its tokens).
    """
    m = topk * num_cols
    cols = seq_lens.long()[:, None] + torch.arange(m)[None, :]
    locs = req_to_token[req_pool_indices.long()[:, None], cols]
    out_cache_loc[: locs.numel()] = locs.reshape(-1).to(out_cache_loc.dtype)


def build_draft_decode_metadata_cpu(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    pool_len: int,
) -> torch.Tensor:
    """Build the draft decode steps' token table.

    A new int32 ``[bs*topk, pool_len]`` token table for the draft decode steps: row
    ``(b, k)`` holds request b's committed slots, then candidate k's own ``num_steps`` draft
    slots (``req_to_token[rp_b, seq_len_b + k*num_steps + s]``) right after them.
    """
    bs = req_pool_indices.numel()
    rows = req_to_token[req_pool_indices.long()].to(torch.int32)  # [bs, pool_len]
    table = rows.repeat_interleave(topk, dim=0).clone()  # [bs*topk, pool_len]
    seq = seq_lens.long()
    steps = torch.arange(num_steps)
    for k in range(1, topk):  # candidate 0's slots already sit right after the prefix
        src = seq[:, None] + k * num_steps + steps[None, :]
        dst = seq[:, None] + steps[None, :]
        table[(torch.arange(bs) * topk + k)[:, None], dst] = rows[torch.arange(bs)[:, None], src]
    return table


def fill_bonus_tokens_cpu(
    accept_tokens: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
    accept_stride: int,
) -> None:
    """Gather each request's bonus token.

    ``bonus_tokens[b]`` := the last accepted token of request b,
    ``accept_tokens.flat[b*stride + accept_lens[b] - 1]``.
    """
    bs = accept_lens.numel()
    index = torch.arange(bs) * accept_stride + accept_lens.long() - 1
    bonus_tokens[:bs] = accept_tokens.reshape(-1)[index].to(bonus_tokens.dtype)


def fill_accept_out_cache_loc_cpu(
    accept_index: torch.Tensor,
    out_cache_loc: torch.Tensor,
    accept_out_cache_loc: torch.Tensor,
) -> None:
    """Gather the accepted tokens' slots.

    Stream compaction: the k-th non-negative entry ``a`` of ``accept_index`` (row-major)
    gives ``accept_out_cache_loc[k] = out_cache_loc[a]``.
    """
    flat = accept_index.reshape(-1).long()
    kept = flat[flat >= 0]
    accept_out_cache_loc[: kept.numel()] = out_cache_loc[kept].to(accept_out_cache_loc.dtype)


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor,
    strides: torch.Tensor,
    tgt_loc: torch.Tensor,
    src_loc: torch.Tensor,
) -> None:
    """Copy KV rows within every layer's buffers.

    For every KV buffer (given by raw address and row stride in bytes), copy row
    ``src_loc[k]`` onto row ``tgt_loc[k]``, all rows read before any is written.

    Only addresses are passed, so each buffer is viewed through ctypes up to the highest row
    touched (the caller's buffers outlive the call).
    """
    if tgt_loc.numel() == 0:
        return
    src = src_loc.reshape(-1).long()
    tgt = tgt_loc.reshape(-1).long()
    rows = int(torch.maximum(src.max(), tgt.max())) + 1
    for address, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        raw = (ctypes.c_uint8 * (rows * stride)).from_address(address)
        buffer = torch.frombuffer(raw, dtype=torch.uint8).view(rows, stride)
        buffer[tgt] = buffer[src]  # advanced indexing reads (copies) every source first


def build_tree_kernel_efficient_cpu(
    parent_list: torch.Tensor,
    selected_index: torch.Tensor,
    verified_seq_len: torch.Tensor,
    tree_mask: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    topk: int,
    depth: int,
    draft_token_num: int,
    tree_mask_mode: int,
) -> None:
    """Build the draft token tree of each request.

    From the top-k choices of the draft steps.

    Node 0 is the verified (bonus) token, node i >= 1 the draft token ``selected_index[b,
    i-1]``; its parent is the root when ``selected_index // topk == 0``, else the node whose
    ``selected_index`` equals ``parent_list[b, selected_index // topk]``. Writes
    ``retrieve_index`` (global node ids), first-child / next-sibling links (children in
    ascending order), ``positions`` (seq_len + depth) and the QLEN_ONLY mask (row x: column 0
    and x's ancestors and x itself).
    """
    if int(tree_mask_mode) != 1:
        raise NotImplementedError(
            f"build_tree_kernel_efficient_cpu: tree_mask_mode {int(tree_mask_mode)} is not "
            "supported by this stand-in (only QLEN_ONLY = 1, what SGLang uses on a CPU)"
        )
    n = draft_token_num
    bs = verified_seq_len.numel()
    sel = selected_index.long().cpu()
    parents_l = parent_list.long().cpu()
    seq = verified_seq_len.long().cpu()
    mask = tree_mask.view(bs, n, n)
    mask[:] = False
    mask[:, :, 0] = True
    pos_out = positions.view(bs, n)
    retrieve_index.copy_(
        (torch.arange(bs)[:, None] * n + torch.arange(n)[None, :]).to(retrieve_index.dtype)
    )
    for b in range(bs):
        sel_b = sel[b].tolist()
        node_of: dict[int, int] = {}
        for i, value in enumerate(sel_b):
            node_of.setdefault(value, i + 1)  # the first match, as the Triton search
        parent = [-1] * n  # -1: root (0) has none; a parent not found links nowhere
        for i in range(1, n):
            p = sel_b[i - 1] // topk
            parent[i] = 0 if p == 0 else node_of.get(int(parents_l[b, p]), -1)
        next_token = [-1] * n
        next_sibling = [-1] * n
        for i in range(n - 1, 0, -1):
            p = parent[i]
            if p >= 0:
                next_sibling[i] = next_token[p]
                next_token[p] = i
        for x in range(n):
            d, node = 0, x
            while node > 0 and d < depth:
                mask[b, x, node] = True
                node = parent[node]
                d += 1
            pos_out[b, x] = int(seq[b]) + d
        retrieve_next_token[b] = torch.tensor(next_token, dtype=retrieve_next_token.dtype)
        retrieve_next_sibling[b] = torch.tensor(next_sibling, dtype=retrieve_next_sibling.dtype)


def verify_tree_greedy_cpu(
    *,
    predicts: torch.Tensor,
    accept_index: torch.Tensor,
    accept_token_num: torch.Tensor,
    candidates: torch.Tensor,
    retrive_index: torch.Tensor,
    retrive_next_token: torch.Tensor,
    retrive_next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
) -> None:
    """Verify the draft tree greedily.

    Greedy verification: from the root, follow the child whose candidate token equals the
    target's argmax at the current node, as long as one does; record the accepted nodes
    (``accept_index``), their count less the root (``accept_token_num``), and the target's
    token after each accepted node (``predicts``, the last one being the bonus token).
    """
    bs, slots = accept_index.shape
    cand = candidates.tolist()
    r_index = retrive_index.tolist()
    r_next = retrive_next_token.tolist()
    r_sib = retrive_next_sibling.tolist()
    target = target_predict.reshape(-1).tolist()
    accepted_rows: list[list[int]] = []
    predicted: dict[int, int] = {}
    for b in range(bs):
        last = r_index[b][0]
        row = [last]
        cur = 0
        for _ in range(1, slots):
            cur = r_next[b][cur]
            t = target[last]
            while cur != -1 and cand[b][cur] != t:
                cur = r_sib[b][cur]
            if cur == -1:
                break
            predicted[last] = t
            last = r_index[b][cur]
            row.append(last)
        predicted[last] = target[last]
        accepted_rows.append(row)
    for b, row in enumerate(accepted_rows):
        accept_index[b, : len(row)] = torch.tensor(row, dtype=accept_index.dtype)
        accept_token_num[b] = len(row) - 1
    if predicted:
        where = torch.tensor(list(predicted), dtype=torch.long)
        predicts.view(-1)[where] = torch.tensor(list(predicted.values()), dtype=predicts.dtype)


def reconstruct_indices_from_tree_mask(
    tree_mask: torch.Tensor,
    verified_seq_len: torch.Tensor,
    positions: torch.Tensor,
    retrieve_index: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    batch_size: int,
    draft_token_num: int,
) -> None:
    """Rebuild NGRAM's tree metadata from its mask.

    NGRAM's tree metadata from its ancestor mask (semantics in SGLang's
    ``kernels/ops/speculative/reconstruct_tree.py`` docstring), vectorised over the batch.
    """
    n, bs = draft_token_num, batch_size
    mask = tree_mask.reshape(bs, n, n).bool()
    lower = torch.ones(n, n, dtype=torch.bool).tril(-1)  # j < i
    anc = mask & lower  # anc[b, i, j]: j is a strict ancestor of i
    positions.view(bs, n)[:] = (anc.sum(-1) + verified_seq_len.long()[:, None]).to(positions.dtype)
    ids = torch.arange(n)
    retrieve_index.view(bs, n)[:] = (torch.arange(bs)[:, None] * n + ids).to(retrieve_index.dtype)
    # parent[i] = max ancestor j, else -1
    parent = torch.where(anc, ids[None, None, :], torch.full_like(anc, -1, dtype=torch.long))
    parent = parent.max(-1).values  # [bs, n]
    # first child of i: min k > i with anc[k, i]
    child = anc.transpose(1, 2)  # child[b, i, k] = anc[b, k, i] (k > i implied)
    big = torch.full((bs, n, n), n, dtype=torch.long)
    first_child = torch.where(child, ids[None, None, :].expand(bs, n, n), big).min(-1).values
    retrieve_next_token.view(bs, n)[:] = torch.where(first_child == n, -1, first_child).to(
        retrieve_next_token.dtype
    )
    # next sibling of i: min k > i with parent[k] == parent[i], -1 if parent[i] < 0
    same = (parent[:, None, :] == parent[:, :, None]) & (ids[None, :] > ids[:, None])[None]
    sib = torch.where(same, ids[None, None, :].expand(bs, n, n), big).min(-1).values
    sib = torch.where((sib == n) | (parent < 0), -1, sib)
    retrieve_next_sibling.view(bs, n)[:] = sib.to(retrieve_next_sibling.dtype)
