"""Default values of the plugin's settings, shared by the options' help and the stages."""

from __future__ import annotations

__all__ = [
    "DEFAULT_FIRST_TOKEN_TIMEOUT",
    "DEFAULT_LOAD_WORKERS",
    "DEFAULT_MAX_CONSECUTIVE_FAILURES",
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SERVER_NAME",
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_STORAGE",
    "INCONCLUSIVE_CHOICES",
    "LAUNCHERS",
]

#: The server a test gets when it names none and several are configured.
DEFAULT_SERVER_NAME = "default"
#: Long enough for a large model to load weights and capture CUDA graphs.
DEFAULT_READY_TIMEOUT = 600.0
#: A request of a measurement may take this long in all (a long queue at high concurrency).
DEFAULT_REQUEST_TIMEOUT = 600.0
#: A stream may go this long without a new token once its first token arrived.
DEFAULT_STALL_TIMEOUT = 60.0
#: A streamed request may wait this long for its first token while the whole run receives
#: no token (a frozen server); measured against SGLang's queueing by
#: ``benchmarks/queue_wait.py`` (see ``LoadGenerator``).
DEFAULT_FIRST_TOKEN_TIMEOUT = 90.0
#: Requests in a row that ended without an answer before a run gives up on the server.
DEFAULT_MAX_CONSECUTIVE_FAILURES = 8
#: Load-generator workers per run (processes, or Ray actors).
DEFAULT_LOAD_WORKERS = 1
#: Launchers ``--sglang-launcher`` accepts; the first is the default.
LAUNCHERS = ("sglang", "emulator")
#: What ``--sglang-inconclusive`` accepts; the first is the default.
INCONCLUSIVE_CHOICES = ("fail", "skip", "warn")
#: pytest-benchmark's default storage, so that ``pytest-benchmark list`` finds ours too.
DEFAULT_STORAGE = "file://./.benchmarks"
