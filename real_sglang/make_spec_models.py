"""Build the real-SGLang tier's speculative-decoding pair: a planted target and its EAGLE3 draft.

Nothing is downloaded. Run it with the tier's virtualenv (torch, transformers, safetensors)::

    $PYTEST_SGLANG_REAL_PYTHON real_sglang/make_spec_models.py --out DIR [--accept-rate 0.8]

It writes ``DIR/target`` and ``DIR/eagle3`` (and ``DIR/plant.json``, what was planted).

**The target** is a random-weight ``LlamaForCausalLM`` whose greedy next token is a fixed
permutation ``f`` of the current token: the embedding rows are ~N(0, 1), every layer's output
projections (``o_proj``, ``down_proj``) are tiny (std 0.002), so the final hidden state is
~ the current token's embedding, and ``lm_head[f(t)] = embed[t]`` (other rows 0). ``f``
permutes the word ids 5..V-1 in cycles of ``--cycle`` tokens. Its depth and width set what a
target step costs (the layers are real matrix products, the outputs just barely matter).

**The EAGLE3 draft** (``LlamaForCausalLMEagle3``, one layer, multi-head attention, ``norm_output``)
predicts ``g = f o sigma``: ``sigma`` fixes a random set A of a fraction ``q`` of the words and
shifts the others cyclically, so ``g(t) = f(t)`` exactly for ``t`` in A. Its attention picks the
current token's own (normalised) embedding: ``q_proj = k_proj = 2 I`` and ``v_proj = I`` on the
embedding half of its input, ``o_proj = 10 I``, ``fc = 0``, ``down_proj = 0``; its own
``lm_head[g(t)] = embed[t]``. A k-step draft chain is accepted while its tokens stay in A, so
the accept length (``completion_tokens / spec_verify_ct``) is ``1 + q + ... + q^k``.

The tokenizer is the tier's WordLevel one (``make_tiny_model.build_tokenizer``), covering the
vocabulary exactly.
"""

# ruff: noqa: T201  (a command-line script: it prints)
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_tiny_model import BOS_ID, EOS_ID, SPECIAL_TOKENS, build_tokenizer

SEED = 0
FIRST_WORD = len(SPECIAL_TOKENS)


def expected_accept_length(q: float, steps: int) -> float:
    """Return the expected accept length of a chain.

    ``1 + q + ... + q^steps``: the mean accept length of a ``steps``-token chain whose
    tokens are each right with probability ``q`` (independently).
    """
    return sum(q**i for i in range(steps + 1))


def permutations(vocab: int, cycle: int, q: float) -> tuple[Any, Any, Any]:
    """Return the planted permutations.

    ``f`` (target), ``g`` (draft) as index tensors over the whole vocabulary (special ids map
    to themselves, never used) and the boolean set A where they agree.
    """
    import torch

    gen = torch.Generator().manual_seed(SEED)
    words = torch.randperm(vocab - FIRST_WORD, generator=gen) + FIRST_WORD
    f = torch.arange(vocab)
    for start in range(0, words.numel(), cycle):
        chunk = words[start : start + cycle]
        f[chunk] = chunk.roll(-1)  # each word -> the next one of its cycle
    agree = torch.zeros(vocab, dtype=torch.bool)
    agree[words[torch.rand(words.numel(), generator=gen) < q]] = True
    others = torch.nonzero(~agree[FIRST_WORD:]).flatten() + FIRST_WORD
    sigma = torch.arange(vocab)
    sigma[others] = others.roll(1)
    g = f[sigma]
    return f, g, agree


def build_target(out: Path, args: argparse.Namespace, f: Any) -> Any:
    """Write the planted target; return its embedding (the draft's lm_head rows come from it)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=args.vocab_size,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=args.hidden // 64,
        num_key_value_heads=max(1, args.hidden // 128),
        head_dim=64,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.normal_(0.0, 0.002)
            elif name.endswith("proj.weight"):
                param.normal_(0.0, 0.02)
        embed = model.model.embed_tokens.weight
        embed.normal_(0.0, 1.0)
        head = torch.zeros_like(model.lm_head.weight)
        head[f[FIRST_WORD:]] = embed[FIRST_WORD:]
        model.lm_head.weight.copy_(head)
    model = model.to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config = GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    build_tokenizer(out, args.vocab_size)
    return model.model.embed_tokens.weight.detach().clone()


def build_eagle3(out: Path, args: argparse.Namespace, embed: Any, g: Any) -> None:
    """Write the EAGLE3 draft (config.json, model.safetensors, the tokenizer)."""
    import torch
    from safetensors.torch import save_file

    hidden, vocab, inter = args.hidden, args.vocab_size, args.draft_intermediate
    heads = hidden // 64
    eye = torch.eye(hidden)
    zero = torch.zeros(hidden, hidden)
    gen = torch.Generator().manual_seed(SEED + 1)
    head = torch.zeros(vocab, hidden)
    head[g[FIRST_WORD:]] = embed[FIRST_WORD:].float()
    weights = {
        "midlayer.self_attn.q_proj.weight": torch.cat([2 * eye, zero], dim=1),
        "midlayer.self_attn.k_proj.weight": torch.cat([2 * eye, zero], dim=1),
        "midlayer.self_attn.v_proj.weight": torch.cat([eye, zero], dim=1),
        "midlayer.self_attn.o_proj.weight": 10 * eye,
        "midlayer.mlp.gate_proj.weight": torch.randn(inter, hidden, generator=gen) * 0.02,
        "midlayer.mlp.up_proj.weight": torch.randn(inter, hidden, generator=gen) * 0.02,
        "midlayer.mlp.down_proj.weight": torch.zeros(hidden, inter),
        "midlayer.input_layernorm.weight": torch.ones(hidden),
        "midlayer.hidden_norm.weight": torch.ones(hidden),
        "midlayer.post_attention_layernorm.weight": torch.ones(hidden),
        "norm.weight": torch.ones(hidden),
        "fc.weight": torch.zeros(hidden, 3 * hidden),
        "lm_head.weight": head,
    }
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in weights.items()}
    tensors["d2t"] = torch.zeros(vocab, dtype=torch.int64)
    tensors["t2d"] = torch.ones(vocab, dtype=torch.bool)
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": 64,
        "num_hidden_layers": 1,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "max_position_embeddings": 4096,
        "norm_output": True,
        "torch_dtype": "bfloat16",
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "pad_token_id": EOS_ID,
    }
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    build_tokenizer(out, vocab)


def check_target(out: Path, f: Any, tokens: int = 40) -> int:
    """Check the saved target follows ``f``.

    Count how many of ``tokens`` greedy steps of the saved target (transformers, float32)
    follow ``f``.
    """
    import torch
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED + 2)
    ids = torch.randint(FIRST_WORD, f.numel(), (1, 8), generator=gen)
    with torch.no_grad():
        logits = model(ids).logits[0]
    predicted = logits.argmax(-1)
    follows = int((predicted == f[ids[0]]).sum())
    rest = torch.randint(FIRST_WORD, f.numel(), (tokens - ids.shape[1],), generator=gen)
    with torch.no_grad():
        more = model(rest[None]).logits[0].argmax(-1)
    return follows + int((more == f[rest]).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="folder for target/, eagle3/")
    parser.add_argument("--accept-rate", type=float, default=0.8, help="q (default 0.8)")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=512, help="a multiple of 128")
    parser.add_argument("--layers", type=int, default=12, help="target layers (>= 4)")
    parser.add_argument("--intermediate", type=int, default=1536)
    parser.add_argument("--draft-intermediate", type=int, default=256)
    parser.add_argument("--cycle", type=int, default=64, help="cycle length of f")
    args = parser.parse_args(argv)
    if not 0.0 <= args.accept_rate <= 1.0:
        parser.error("--accept-rate must be in [0, 1]")
    if args.hidden % 128 or args.layers < 4:
        parser.error("--hidden must be a multiple of 128 and --layers at least 4")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    f, g, agree = permutations(args.vocab_size, args.cycle, args.accept_rate)
    embed = build_target(args.out / "target", args, f)
    build_eagle3(args.out / "eagle3", args, embed, g)
    follows = check_target(args.out / "target", f)
    if follows < 38:
        print(
            f"make_spec_models: the target follows f on only {follows}/40 tokens", file=sys.stderr
        )
        return 1
    q = float(agree[FIRST_WORD:].float().mean())
    plant = {
        "accept_rate": q,
        "expected_accept_length": {str(k): expected_accept_length(q, k) for k in (1, 2, 3, 5)},
        "target_follows_f": f"{follows}/40",
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    (args.out / "plant.json").write_text(json.dumps(plant, indent=2) + "\n")
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file())
    print(
        f"spec models: q {q:.3f}, target follows f {follows}/40, {size / 1e6:.1f} MB in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
