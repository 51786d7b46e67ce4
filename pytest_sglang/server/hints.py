"""Known failure signatures in a server log, turned into hints that say what to do."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SIGNATURES", "hints_for"]

_OOM = (
    "CUDA out of memory: lower --mem-fraction-static in the profile's args, or free the "
    "GPUs (other processes may hold memory: see nvidia-smi)"
)

#: (substring of a log line, hint). Order matters only for the order hints are shown in.
SIGNATURES: tuple[tuple[str, str], ...] = (
    (
        "is greater than the derived context_length",
        "the draft model's context length is shorter than the target's (SGLang refuses this "
        "since 0.5): set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in the profile's env, or "
        "pass a --context-length no larger than the draft's in its args",
    ),
    (
        "Address already in use",
        "the port was taken between the plugin's check and the server's bind: another server "
        "(a leftover?) is starting on this machine; look for it and rerun",
    ),
    ("CUDA out of memory", _OOM),
    ("OutOfMemoryError", _OOM),
    (
        "The memory capacity is unbalanced",
        "some GPUs are partly occupied by other processes: free them before launching",
    ),
    (
        "ambiguous option: --cuda-graph-max-bs",
        "SGLang 0.5.23 removed --cuda-graph-max-bs: use --cuda-graph-max-bs-decode",
    ),
    (
        "Initialization failed. warmup error",
        "the server's warm-up request failed: read the traceback in the log above",
    ),
    (
        "No module named sglang",
        "SGLang is not installed for this Python: install it, set the profile's command, or "
        "use --sglang-launcher=emulator for a dry run",
    ),
)


def hints_for(lines: Iterable[str]) -> list[str]:
    """Return the hints whose signature appears in ``lines``, without duplicates."""
    text = "\n".join(lines)
    found: list[str] = []
    for signature, hint in SIGNATURES:
        if signature in text and hint not in found:
            found.append(hint)
    return found
