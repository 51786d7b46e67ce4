"""Hints that say what to do, from a log's failure signatures, an exit code, a gate failure."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterable, Sequence

from pytest_sglang.server.probing import Seen

__all__ = ["SIGNATURES", "auth_problem", "exit_hint", "gate_hint", "hints_for", "without_probes"]

_OOM = (
    "CUDA out of memory: lower --mem-fraction-static in the profile's args, or free the "
    "GPUs (other processes may hold memory: see nvidia-smi)"
)

#: Substring of a log line -> its hint, in the order hints are shown.
SIGNATURES: dict[str, str] = {
    "is greater than the derived context_length": (
        "the draft model's context length is shorter than the target's (SGLang refuses this "
        "since 0.5): set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 in the profile's env, or "
        "pass a --context-length no larger than the draft's in its args"
    ),
    "Address already in use": (
        "the port was taken between the plugin picking it and the server's bind: another "
        "server (a leftover?) is starting on this machine; look for it and rerun"
    ),
    "CUDA out of memory": _OOM,
    "OutOfMemoryError": _OOM,
    "The memory capacity is unbalanced": (
        "some GPUs are partly occupied by other processes: free them before launching"
    ),
    "ambiguous option: --cuda-graph-max-bs": (
        "SGLang 0.5.23 removed --cuda-graph-max-bs: use --cuda-graph-max-bs-decode"
    ),
    "Initialization failed. warmup error": (
        "the server's warm-up request failed: read the traceback in the log above"
    ),
    "No module named sglang": (
        "SGLang is not installed for this Python: install it, set the profile's command, or "
        "use --sglang-launcher=emulator for a dry run"
    ),
}


def hints_for(lines: Iterable[str]) -> list[str]:
    """Return the hints whose signature appears in ``lines`` (any case), without duplicates."""
    text = "\n".join(lines).lower()
    return list(dict.fromkeys(h for sig, h in SIGNATURES.items() if sig.lower() in text))


#: The readiness gate's requests as an access log shows them (uvicorn, SGLang).
_PROBE_LINE = re.compile(
    r'"(?:GET|HEAD) /(?:ready|health|health_generate|v1/models|server_info|model_info|'
    r'get_server_info|get_model_info)(?:\?[^ "]*)? HTTP/[0-9.]+"'
)


def without_probes(lines: Sequence[str]) -> tuple[list[str], int]:
    """Return ``lines`` less the gate's probe requests, and how many were left out."""
    kept = [line for line in lines if not _PROBE_LINE.search(line)]
    return kept, len(lines) - len(kept)


def signal_name(code: int | None) -> str | None:
    """Return the name of the signal a negative exit code says ended the process, or None."""
    with contextlib.suppress(ValueError):
        return signal.Signals(-code).name if code is not None and code < 0 else None
    return None


#: What a signal that ended the server says about how it ended.
_SIGNAL_HINTS = {
    "SIGKILL": "the server was killed by SIGKILL: by the kernel's out-of-memory killer (see "
    "dmesg), by a crash handler that kills its own process group (SGLang does when a "
    "scheduler process fails: read the log above), or by someone else",
    "SIGSEGV": "the server crashed (SIGSEGV): read the log above for the native traceback",
}


def exit_hint(code: int | None) -> str | None:
    """Return what an exit code says about how the server ended, or None."""
    name = signal_name(code)
    return None if name is None else _SIGNAL_HINTS.get(name, f"the server was ended by {name}")


def gate_hint(phase: str, last: Seen | None) -> str | None:
    """Return what a readiness gate failure in ``phase`` likely means, given its last probe."""
    if phase == "connect" and last is not None and last.error is not None:
        if "no answer" in last.error:
            return (
                "the port accepts connections but nothing answers (in full, in time): "
                "a hung, zombie or dribbling server? check its process and logs"
            )
        return (
            "nothing answers at this URL: is the server running (a large model can "
            "take many minutes to load before the port opens) and is the URL right?"
        )
    if phase == "health" and last is not None and last.status == 503:
        return (
            "the server is up but still warming up (503 from the health endpoints); "
            "if it needs longer, raise --sglang-ready-timeout; if it never turns "
            "healthy, read its log for the warm-up error"
        )
    return None


def auth_problem(path: str, key_given: bool) -> str:
    """Explain a 401 from ``path``: the key given is wrong, or the server wants one."""
    why = (
        "the server rejects the API key given (from --sglang-api-key / PYTEST_SGLANG_API_KEY / "
        "sglang_api_key); pass the key the server was started with (--api-key)"
        if key_given
        else "the server was started with --api-key; pass the same key with --sglang-api-key or "
        "PYTEST_SGLANG_API_KEY"
    )
    return f"GET {path} answered 401 Unauthorized: {why}"
