"""``torch.ops.sgl_kernel.decode_attention_cpu`` / ``extend_attention_cpu`` in pure torch.

SGLang's ``intel_amx`` attention backend (``srt/layers/attention/intel_amx_backend.py``) looks
both up as torch ops in namespace ``sgl_kernel`` when it is built; speculative decoding on a
CPU needs that backend (the draft backends exist for it, not for ``torch_native``). The maths
is the Triton reference's (``kernels/ops/attention/{decode,extend}_attention.py``) over SGLang's
paged KV layout (``req_to_token`` rows of slot numbers), accumulated in float32 and written to
the bf16 output in place. Sliding windows, attention sinks and cross-attention (no model of
this tier uses them) raise ``NotImplementedError`` naming the op.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

_LIB = torch.library.Library("sgl_kernel", "DEF")

_LIB.define(
    "decode_attention_cpu(Tensor q, Tensor(a!) k_buffer, Tensor(b!) v_buffer, float key_scale, "
    "float value_scale, Tensor(c!) output, Tensor? key, Tensor? value, Tensor loc, "
    "Tensor(d!) attn_logits, Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, "
    "float sm_scale, float logit_cap, bool is_cross_attention, int sliding_window, "
    "Tensor? encoder_lens, Tensor? sinks) -> ()"
)
_LIB.define(
    "extend_attention_cpu(Tensor q_extend, Tensor? k_extend, Tensor? v_extend, "
    "Tensor(a!) o_extend, Tensor k_buffer, Tensor v_buffer, float key_scale, float value_scale, "
    "Tensor req_to_token, Tensor req_pool_indices, Tensor seq_lens, Tensor extend_seq_lens, "
    "Tensor extend_start_loc, SymInt max_len_extend, float sm_scale, float logit_cap, "
    "bool is_cross_attention, int sliding_window, Tensor? encoder_lens, Tensor? sinks, "
    "Tensor? custom_mask, bool is_causal) -> ()"
)


def _unsupported(
    op: str,
    is_cross_attention: bool,
    sliding_window: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
) -> None:
    what = [
        name
        for name, used in (
            ("cross-attention", is_cross_attention or encoder_lens is not None),
            (f"a sliding window ({sliding_window - 1})", sliding_window > 0),
            ("attention sinks", sinks is not None),
        )
        if used
    ]
    if what:
        raise NotImplementedError(
            f"sgl_kernel.{op} (pytest-sglang's pure-torch stand-in) does not support "
            f"{', '.join(what)}"
        )


def _softmax_weighted(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    visible: torch.Tensor,
    scale: float,
    logit_cap: float,
) -> torch.Tensor:
    """Masked softmax attention in float32.

    Attention of queries ``q`` [..., Q, H, D] over keys ``k``/``v`` [..., S, H, D(v)] where
    ``visible`` [..., Q, S] is true; float32 result [..., Q, H, Dv].
    """
    scores = torch.einsum("...qhd,...shd->...hqs", q, k) * scale
    if logit_cap > 0:
        scores = logit_cap * torch.tanh(scores / logit_cap)
    scores = scores.masked_fill(~visible.unsqueeze(-3), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return torch.einsum("...hqs,...shd->...qhd", weights, v)


def _heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Repeat the KV heads of ``x`` [..., Hkv, D] for grouped-query attention."""
    kv_heads = x.shape[-2]
    return x if kv_heads == heads else x.repeat_interleave(heads // kv_heads, dim=-2)


def decode_attention_cpu(
    q: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    output: torch.Tensor,
    key: torch.Tensor | None,
    value: torch.Tensor | None,
    loc: torch.Tensor,
    attn_logits: torch.Tensor,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
) -> None:
    """Decode attention over the paged KV cache.

    One query token per row i: store ``key``/``value`` at ``loc`` (when given), then attend
    over the slots ``req_to_token[req_pool_indices[i], :seq_lens[i]]``.
    """
    _unsupported("decode_attention_cpu", is_cross_attention, sliding_window, encoder_lens, sinks)
    if key is not None and value is not None:
        k_buffer[loc.long()] = key.to(k_buffer.dtype)
        v_buffer[loc.long()] = value.to(v_buffer.dtype)
    rows = q.shape[0]
    if rows == 0:
        return
    lens = seq_lens.long()
    width = int(lens.max())
    slots = req_to_token[req_pool_indices.long(), :width].long()  # [T, S]
    visible = (torch.arange(width)[None, :] < lens[:, None]).unsqueeze(1)  # [T, 1, S]
    slots = torch.where(visible.squeeze(1), slots, 0)
    heads = q.shape[1]
    k = _heads(k_buffer[slots].float(), heads)  # [T, S, H, D]
    v = _heads(v_buffer[slots].float(), heads)
    out = _softmax_weighted(
        q.float().unsqueeze(1), k, v, visible, sm_scale * key_scale, logit_cap
    )  # [T, 1, H, Dv]
    output.copy_((out.squeeze(1) * value_scale).to(output.dtype))


def extend_attention_cpu(
    q_extend: torch.Tensor,
    k_extend: torch.Tensor | None,
    v_extend: torch.Tensor | None,
    o_extend: torch.Tensor,
    k_buffer: torch.Tensor,
    v_buffer: torch.Tensor,
    key_scale: float,
    value_scale: float,
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    extend_seq_lens: torch.Tensor,
    extend_start_loc: torch.Tensor,
    max_len_extend: int,
    sm_scale: float,
    logit_cap: float,
    is_cross_attention: bool,
    sliding_window: int,
    encoder_lens: torch.Tensor | None,
    sinks: torch.Tensor | None,
    custom_mask: torch.Tensor | None,
    is_causal: bool,
) -> None:
    """Extend (prefill / verify) attention over the paged KV cache.

    Sequence b's ``E = extend_seq_lens[b]`` new tokens (rows ``extend_start_loc[b]`` on)
    attend to its whole prefix ``req_to_token[rp_b, :seq_lens[b] - E]`` and to the new tokens
    allowed by ``custom_mask`` (per request E x E, row-major, concatenated) or, without one, the
    causal rule.
    """
    _unsupported("extend_attention_cpu", is_cross_attention, sliding_window, encoder_lens, sinks)
    heads = q_extend.shape[1]
    mask_offset = 0
    for rp, total, ext, start in zip(
        req_pool_indices.tolist(),
        seq_lens.tolist(),
        extend_seq_lens.tolist(),
        extend_start_loc.tolist(),
        strict=True,
    ):
        if ext == 0:
            continue
        prefix = total - ext
        rows = slice(start, start + ext)
        slots = req_to_token[rp, :total].long()
        k = k_buffer[slots].float()
        v = v_buffer[slots].float()
        if k_extend is not None and v_extend is not None:
            k[prefix:] = k_extend[rows].float()
            v[prefix:] = v_extend[rows].float()
        visible = torch.ones(ext, total, dtype=torch.bool)
        if custom_mask is not None:
            own = custom_mask[mask_offset : mask_offset + ext * ext].view(ext, ext).bool()
            visible[:, prefix:] = own
            mask_offset += ext * ext
        elif is_causal:
            visible[:, prefix:] = torch.ones(ext, ext, dtype=torch.bool).tril()
        out = _softmax_weighted(
            q_extend[rows].float(),
            _heads(k, heads),
            _heads(v, heads),
            visible,
            sm_scale * key_scale,
            logit_cap,
        )
        o_extend[rows] = (out * value_scale).to(o_extend.dtype)


def register(wrap: Callable[[str, Callable[..., None]], Callable[..., None]]) -> None:
    """Register both ops' implementations.

    Register both ops' implementations, each wrapped by ``wrap(qualname, op)`` (the call
    log), for every dispatch key (``CompositeExplicitAutograd``).
    """
    for name, op in (
        ("decode_attention_cpu", decode_attention_cpu),
        ("extend_attention_cpu", extend_attention_cpu),
    ):
        _LIB.impl(name, wrap(f"sgl_kernel.{name}", op), "CompositeExplicitAutograd")
