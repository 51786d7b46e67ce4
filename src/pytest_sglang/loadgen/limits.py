"""How long a measured request may take: the load generator's and the plugin's defaults.

A module of its own so that the plugin's settings can quote them without importing the
load generator (and httpx) on every pytest run.
"""

from __future__ import annotations

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "DEFAULT_STALL_TIMEOUT"]

#: Seconds one request may take in all, by default: long enough for a 1T-parameter model to
#: generate a few thousand tokens behind a queue at high concurrency.
DEFAULT_REQUEST_TIMEOUT = 600.0

#: Seconds a stream may go without a new token once its first token arrived. A healthy
#: server pauses a running request for a prefill of others or a retraction under memory
#: pressure, seconds at most; a minute of silence is a stall in any acceptance test.
DEFAULT_STALL_TIMEOUT = 60.0
