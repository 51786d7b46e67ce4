"""The engine interface: what the HTTP layer needs from token generation.

The HTTP layer turns requests into ``GenerationRequest``s, iterates ``Engine.generate`` and
builds SGLang's responses from the ``TokenChunk``s; it knows nothing about timing. An engine
owns scheduling and timing and keeps the scheduler-side counters in ``ServerStats.scheduler``
(running/queued requests, used tokens, decode windows, speculative verifies) up to date. The
simple fixed-delay engine (``simple_engine``) implements it today; a continuous-batching and
speculative-decoding performance model can replace it without touching the routes.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding as configured: tokens per verify and the mean acceptance length."""

    algorithm: str
    num_steps: int
    num_draft_tokens: int
    accept_length: float


@dataclass(frozen=True)
class GenerationRequest:
    """One sequence to generate (a batch request is several of these).

    ``max_new_tokens`` ``None`` means up to the context length. ``log_metrics`` false keeps the
    request out of the tokenizer-side metrics (health probes).
    """

    rid: str
    input_ids: Sequence[int]
    max_new_tokens: int | None
    ignore_eos: bool = False
    temperature: float = 1.0
    log_metrics: bool = True
    #: Prompt tokens found in the prefix cache (the batch engine does not prefill them).
    cached_tokens: int = 0


@dataclass(frozen=True)
class FinishReason:
    """SGLang's finish reason: ``length`` (with ``length``), ``stop`` (``matched``) or ``abort``."""

    type: str
    length: int | None = None
    matched: int | str | None = None
    message: str | None = None
    status_code: int | None = None
    err_type: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Return the native ``meta_info.finish_reason`` object."""
        if self.type == "length":
            return {"type": "length", "length": self.length}
        if self.type == "stop":
            return {"type": "stop", "matched": self.matched}
        return {
            "type": self.type,
            "message": self.message,
            "status_code": self.status_code,
            "err_type": self.err_type,
        }

    @property
    def matched_stop(self) -> int | str | None:
        """The OpenAI ``matched_stop`` value: the matched token or string, else ``None``."""
        return self.matched if self.type == "stop" else None


@dataclass(frozen=True)
class SchedulerTimes:
    """When the scheduler handled a request, in ``time.monotonic()`` seconds.

    ``queued``: it entered the waiting queue; ``forward_entry``: its prefill forward began;
    ``prefill_finished``: that forward ended (the first token exists). SGLang reports them
    in ``meta_info`` as ``queue_time`` (a duration) and the wall-clock ``forward_entry_time``
    and ``prefill_finished_time`` (``srt/observability/req_time_stats.py``).
    """

    queued: float
    forward_entry: float
    prefill_finished: float


@dataclass(frozen=True)
class TokenChunk:
    """New tokens from one engine step (one forward, or one verify under speculation).

    ``draft_accepts`` holds, per verify forward in this chunk, the draft tokens accepted
    (excluding the bonus token); empty when the chunk came from prefill or plain decode. The last
    chunk of a request carries ``finish`` and may have no tokens. The first chunk with tokens
    carries the scheduler's ``times``.
    """

    token_ids: tuple[int, ...]
    draft_accepts: tuple[int, ...] = ()
    finish: FinishReason | None = None
    cached_tokens: int = 0
    times: SchedulerTimes | None = None


class Engine(Protocol):
    """Token generation behind the HTTP layer."""

    async def start(self) -> None:
        """Start background work (a scheduler loop); called before the port opens."""

    async def stop(self) -> None:
        """Shut down: running and queued requests end promptly (finish reason ``abort``)."""

    def generate(self, request: GenerationRequest) -> AsyncGenerator[TokenChunk, None]:
        """Generate ``request``'s tokens; the last chunk has ``finish`` set.

        An async generator: closing it early (the client went away) must release the
        request's slot.
        """
        ...
