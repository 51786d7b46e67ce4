"""Build the real-SGLang tier's tiny random-weight Llama model. Nothing is downloaded.

Run it with the tier's virtualenv (it needs torch and transformers)::

    $PYTEST_SGLANG_REAL_PYTHON real_sglang/make_tiny_model.py --out DIR [--vocab-size 32000]

What it writes into DIR:

- ``config.json``, ``generation_config.json``, ``model.safetensors``: a ``LlamaForCausalLM``
  (hidden 64, 2 layers, 4 attention heads, 2 KV heads, intermediate 128, bf16,
  max_position_embeddings 4096) with random weights from a fixed seed, written by
  ``save_pretrained`` (~8.7 MB at vocab 32000).
- ``tokenizer.json``: a WordLevel tokenizer split on whitespace. Ids 0-4 are the special
  tokens ``<unk> <s> </s> <|im_start|> <|im_end|>``; ids 5..V-1 are the words
  ``w0 .. w{V-6}``. The tokenizer therefore covers exactly the model's ``vocab_size`` V:
  every id a tokenizer can produce is a row of the embedding (an id >= V crashes the whole
  SGLang server, see README). Unknown words encode to ``<unk>`` (id 0).
- ``tokenizer_config.json``: ``PreTrainedTokenizerFast`` with a ChatML-like
  ``chat_template``, so ``/v1/chat/completions`` works.

``--vocab-size 1024`` makes the small model used to show that an ``input_ids`` entry beyond
the vocabulary kills the server.
"""

# ruff: noqa: T201  (a command-line script: it prints)
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
UNK_ID, BOS_ID, EOS_ID, IM_START_ID, IM_END_ID = range(len(SPECIAL_TOKENS))

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

SEED = 0


def build_tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    n_words = vocab_size - len(SPECIAL_TOKENS)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"w{i}": len(SPECIAL_TOKENS) + i for i in range(n_words)})
    assert len(vocab) == vocab_size
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.save(str(out / "tokenizer.json"))

    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "unk_token": "<unk>",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "pad_token": "</s>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def build_model(out: Path, vocab_size: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=EOS_ID,
    )
    torch.manual_seed(SEED)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config = GenerationConfig(
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=EOS_ID
    )
    model.save_pretrained(out)


def check(out: Path, vocab_size: int) -> None:
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out)
    cfg = AutoConfig.from_pretrained(out)
    assert cfg.vocab_size == vocab_size == len(tok), (cfg.vocab_size, len(tok))
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "w1 w2 hello"}], add_generation_prompt=True, tokenize=True
    )
    if isinstance(ids, dict) or hasattr(ids, "keys"):  # BatchEncoding in newer transformers
        ids = ids["input_ids"]
    assert ids[0] == IM_START_ID and max(ids) < vocab_size, ids
    assert tok.decode([5, 6, 7]) == "w0 w1 w2", tok.decode([5, 6, 7])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="model directory to write")
    parser.add_argument("--vocab-size", type=int, default=32000, help="default: 32000")
    args = parser.parse_args(argv)
    if args.vocab_size <= len(SPECIAL_TOKENS):
        parser.error(f"--vocab-size must be > {len(SPECIAL_TOKENS)}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    build_tokenizer(args.out, args.vocab_size)
    build_model(args.out, args.vocab_size)
    check(args.out, args.vocab_size)
    size = sum(p.stat().st_size for p in args.out.iterdir() if p.is_file())
    print(f"tiny model: vocab {args.vocab_size}, {size / 1e6:.1f} MB in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
