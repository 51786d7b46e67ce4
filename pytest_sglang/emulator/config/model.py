"""The emulated model's config: what SGLang reads from the checkpoint's ``config.json``.

When ``--model-path`` is a local directory with a ``config.json`` (a real checkpoint, or the
real-SGLang tier's tiny model), the emulator reads it as SGLang does: the architecture
(``architectures[0]``), the HF ``model_type``, the vocabulary size, the EOS token id and the
context length (SGLang's ``get_context_length``: the first of ``max_sequence_length``,
``seq_length``, ``max_seq_len``, ``model_max_length``, ``max_position_embeddings``, times the
rope-scaling factor unless the scaling is llama3-style or keeps the original length; 2048
when none is set). ``text_config`` is read for multimodal configs.

Otherwise (a Hub id such as ``meta-llama/Llama-3.1-8B-Instruct``: there is nothing to read
without a download) the architecture is guessed from the model path, the vocabulary is
Llama-3's (128256) and the context length is ``--emulator-model-context-length`` (131072).
``--emulator-model-context-length`` and ``--emulator-architecture``, when given, win over
both. The guess matters for SGLang's speculative defaults (Llama targets get 5/4/8, most
others 3/1/4).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# (substring of the lower-cased model path, architecture, HF model_type, EOS token id)
_KNOWN: tuple[tuple[str, str, str, int], ...] = (
    ("kimi", "DeepseekV3ForCausalLM", "kimi_k2", 163586),
    ("deepseek", "DeepseekV3ForCausalLM", "deepseek_v3", 1),
    ("qwen3", "Qwen3ForCausalLM", "qwen3", 151645),
    ("qwen", "Qwen2ForCausalLM", "qwen2", 151645),
    ("gpt-oss", "GptOssForCausalLM", "gpt_oss", 200002),
    ("glm", "Glm4MoeForCausalLM", "glm4_moe", 151329),
    ("mixtral", "MixtralForCausalLM", "mixtral", 2),
    ("mistral", "MistralForCausalLM", "mistral", 2),
    ("grok", "Grok1ForCausalLM", "grok-1", 2),
    ("llama-2", "LlamaForCausalLM", "llama", 2),
    ("llama", "LlamaForCausalLM", "llama", 128009),
)
_DEFAULT = ("LlamaForCausalLM", "llama", 128009)
_ARCH_DEFAULTS = {arch: (model_type, eos) for _, arch, model_type, eos in _KNOWN}

VOCAB_SIZE = 128256
DEFAULT_CONTEXT_LENGTH = 131072
#: SGLang's ``CONTEXT_LENGTH_KEYS``, in its order of preference.
CONTEXT_LENGTH_KEYS = (
    "max_sequence_length",
    "seq_length",
    "max_seq_len",
    "model_max_length",
    "max_position_embeddings",
)


@dataclass(frozen=True)
class ModelProfile:
    """Architecture, HF model type, context length, vocabulary, EOS id and size of the model."""

    architecture: str
    model_type: str
    context_length: int
    eos_token_id: int
    params_billion: float
    vocab_size: int = VOCAB_SIZE
    #: Where the facts come from: the ``config.json`` path, or ``"guessed from the model path"``.
    source: str = "guessed from the model path"


def guess_profile(
    model_path: str, context_length: int | None, architecture: str | None
) -> ModelProfile:
    """Build the profile for ``model_path``: its ``config.json`` when local, else a guess.

    ``context_length`` (``--emulator-model-context-length``) and ``architecture``
    (``--emulator-architecture``) override what either finds when they are not ``None``.
    """
    config = read_config(model_path)
    if config is not None:
        profile = _from_config(config, Path(model_path) / "config.json")
    else:
        profile = _from_name(model_path)
    if architecture is not None:
        model_type, eos = _ARCH_DEFAULTS.get(
            architecture, (profile.model_type, profile.eos_token_id)
        )
        profile = _replace(
            profile,
            architecture=architecture,
            model_type=model_type,
            eos_token_id=eos if config is None else profile.eos_token_id,
        )
    if context_length is not None:
        profile = _replace(profile, context_length=context_length)
    return profile


def read_config(model_path: str) -> dict[str, Any] | None:
    """Return a local model directory's ``config.json``, or ``None`` (not local, unreadable)."""
    path = Path(model_path) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def context_length_of(config: dict[str, Any]) -> int:
    """SGLang's ``get_context_length`` on a config dict (see the module docstring)."""
    scaling = config.get("rope_scaling")
    factor = 1.0
    if isinstance(scaling, dict) and scaling:
        factor = float(scaling.get("factor", 1))
        if "original_max_position_embeddings" in scaling or scaling.get("rope_type") == "llama3":
            factor = 1.0
    for key in CONTEXT_LENGTH_KEYS:
        value = config.get(key)
        if value is not None:
            return int(factor * value)
    return 2048


def _from_config(config: dict[str, Any], path: Path) -> ModelProfile:
    text = config.get("text_config")
    text_config = text if isinstance(text, dict) else config
    architectures = config.get("architectures") or ["LlamaForCausalLM"]
    eos = text_config.get("eos_token_id", config.get("eos_token_id"))
    if isinstance(eos, list):
        eos = eos[0] if eos else None
    vocab = text_config.get("vocab_size", config.get("vocab_size")) or VOCAB_SIZE
    model_type = str(config.get("model_type") or "llama")
    return ModelProfile(
        architecture=str(architectures[0]),
        model_type=model_type,
        context_length=context_length_of(text_config),
        eos_token_id=int(eos) if isinstance(eos, int) else _DEFAULT[2],
        params_billion=_params_from_config(text_config, int(vocab)),
        vocab_size=int(vocab),
        source=str(path),
    )


def _from_name(model_path: str) -> ModelProfile:
    lowered = model_path.lower()
    arch, model_type, eos = _DEFAULT
    for needle, known_arch, known_type, known_eos in _KNOWN:
        if needle in lowered:
            arch, model_type, eos = known_arch, known_type, known_eos
            break
    return ModelProfile(
        architecture=arch,
        model_type=model_type,
        context_length=DEFAULT_CONTEXT_LENGTH,
        eos_token_id=eos,
        params_billion=_params_billion(lowered),
    )


def _replace(profile: ModelProfile, **changes: Any) -> ModelProfile:
    from dataclasses import replace

    return replace(profile, **changes)


def _params_billion(lowered_path: str) -> float:
    # "Llama-3.1-8B" -> 8.0, "Kimi-K2.5" -> none found; sizes only feed memory figures.
    match = re.search(r"(\d+(?:\.\d+)?)b(?![a-z])", lowered_path)
    return float(match.group(1)) if match else 8.0


def _params_from_config(config: dict[str, Any], vocab: int) -> float:
    """Estimate a dense decoder's parameter count from its shape (memory figures only)."""
    try:
        hidden = int(config["hidden_size"])
        layers = int(config["num_hidden_layers"])
        inter = int(config.get("intermediate_size") or 4 * hidden)
    except (KeyError, TypeError, ValueError):
        return 8.0
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    per_layer = 4 * hidden * hidden + 3 * hidden * inter
    return (embeddings + layers * per_layer) / 1e9
