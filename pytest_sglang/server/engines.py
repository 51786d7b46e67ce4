"""Well-known servers that are not SGLang, recognised from what they answer (pure, no I/O).

Each signature was read in the engine's own source; vLLM's ``Server`` header is uvicorn's, as
SGLang's is, so only ``owned_by`` tells them apart.
"""

from __future__ import annotations

__all__ = ["advice", "recognise"]

#: ``owned_by`` values an engine is known to answer for itself.
_OWNED_BY = {
    "vllm": "vLLM",
    "llamacpp": "llama.cpp (llama-server)",
    "tensorrt_llm": "TensorRT-LLM (trtllm-serve)",
    "triton inference server": "Triton Inference Server (OpenAI frontend)",
    "library": "Ollama",
}
#: ``Server`` header values (their product part, lower case) an engine is known to send.
_SERVER_HEADER = {"llama.cpp": "llama.cpp (llama-server)"}


def recognise(server_header: str | None, models: object) -> tuple[str, str] | None:
    """Return the engine a ``Server`` header and a ``/v1/models`` body (any JSON) point to.

    With it, what gave it away; None when neither tells.
    """
    if server_header:
        product = server_header.split("/", 1)[0].strip().lower()
        if product in _SERVER_HEADER:
            return _SERVER_HEADER[product], f"its Server header is {server_header!r}"
    cards = models.get("data") if isinstance(models, dict) else None
    if not isinstance(cards, list) or not cards or not isinstance(cards[0], dict):
        return None
    card = cards[0]
    owned_by = card.get("owned_by")
    if not isinstance(owned_by, str):
        return None
    evidence = f"its /v1/models says owned_by {owned_by!r}"
    engine = _OWNED_BY.get(owned_by.lower())
    if engine is not None:
        return engine, evidence
    if owned_by and owned_by == card.get("id") and len(cards) == 1:
        return "Text Generation Inference (TGI)", evidence + ", its own model id"
    return None


def advice(name: str, url: str) -> str:
    """Return how to measure a server at ``url`` that is not SGLang."""
    return (
        "to measure it against SGLang servers, declare it as a plain OpenAI-compatible "
        f"server: --sglang-url {name}=openai+{url} (its gate then checks /health or "
        "/v1/models only, and workloads use the completions or chat endpoint)"
    )
