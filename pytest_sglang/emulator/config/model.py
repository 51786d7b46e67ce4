"""The emulated model's config: what SGLang would read from the checkpoint's ``config.json``.

There is no checkpoint, so the architecture is guessed from the model path (or given with
``--emulator-architecture``) and the context length comes from ``--emulator-model-context-length``.
The guess matters for SGLang's speculative defaults (Llama targets get 5/4/8, most others 3/1/4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ModelProfile:
    """Architecture, HF model type, context length, EOS id and size of the emulated model."""

    architecture: str
    model_type: str
    context_length: int
    eos_token_id: int
    params_billion: float
    vocab_size: int = VOCAB_SIZE


def guess_profile(model_path: str, context_length: int, architecture: str | None) -> ModelProfile:
    """Build the profile for ``model_path``; ``architecture`` overrides the name-based guess."""
    lowered = model_path.lower()
    arch, model_type, eos = _DEFAULT
    for needle, known_arch, known_type, known_eos in _KNOWN:
        if needle in lowered:
            arch, model_type, eos = known_arch, known_type, known_eos
            break
    if architecture is not None:
        model_type, eos = _ARCH_DEFAULTS.get(architecture, (model_type, eos))
        arch = architecture
    return ModelProfile(
        architecture=arch,
        model_type=model_type,
        context_length=context_length,
        eos_token_id=eos,
        params_billion=_params_billion(lowered),
    )


def _params_billion(lowered_path: str) -> float:
    # "Llama-3.1-8B" -> 8.0, "Kimi-K2.5" -> none found; sizes only feed memory figures.
    match = re.search(r"(\d+(?:\.\d+)?)b(?![a-z])", lowered_path)
    return float(match.group(1)) if match else 8.0
