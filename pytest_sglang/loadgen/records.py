"""Plain data the load generator produces: one :class:`RequestRecord` per request sent.

Every timestamp is ``time.perf_counter()`` of the process that ran the load (one monotonic
clock); ``as_dict`` makes them relative to an origin (the run's start) for reports.

Also what it learns of a server, :class:`ConnectionHabits`: some servers close the
connection after every response while advertising keep-alive, so a pooled request fails
before any response byte (``docs/metrics.md``, "Connections"). The server handle keeps one
for every load generator of that server: the first warm-up's probe learns the habit, later
runs start with a fresh connection each.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Types only: the server handle imports this module (ConnectionHabits), and so do the
    # launched server's reaper and log pump, which need no event loop nor workload.
    from pytest_sglang.loadgen.progress import ClientLoad
    from pytest_sglang.loadgen.schedule import Load
    from pytest_sglang.loadgen.workload import Workload

__all__ = ["ConnectionHabits", "LoadRun", "RequestRecord"]


@dataclass
class RequestRecord:
    """What happened to one request, filled in while its response streams in.

    ``chunk_times`` and ``chunk_tokens``: when each chunk with generated tokens arrived and
    how many it carried; ``chunk_tokens_exact`` is false where the server did not say and
    they were spread evenly (``docs/metrics.md``, "Token counts"). A request failed when
    ``error`` is set; failed records are kept, never dropped.
    """

    index: int
    warmup: bool
    #: Requested lengths, so a record can be judged on its own.
    input_len: int
    output_len: int
    #: When the load generator began the request (handed it to the HTTP client).
    started: float = 0.0
    #: When the request's bytes were handed to the socket of an open connection, where the
    #: TTFT and end-to-end clocks start (the client's send path is not server latency);
    #: ``started`` when the request never reached a connection.
    sent: float = 0.0
    #: Open loop only: when the arrival schedule wanted it sent.
    scheduled: float | None = None
    #: When the response was complete (``[DONE]``, or the body) or the request failed.
    end: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_tokens_exact: bool = True
    #: Generated tokens as the server reports them (final ``meta_info`` or ``usage``).
    output_tokens_server: int | None = None
    #: Generated tokens as the client saw them arrive (see ``streams`` for how, per endpoint).
    output_tokens_client: int | None = None
    #: Prompt tokens as the server reports them.
    prompt_tokens: int | None = None
    #: Verify forwards of speculative decoding (final ``meta_info``); ``None`` without it.
    spec_verify_ct: int | None = None
    finish_reason: str | None = None
    #: HTTP status; ``None`` when no response arrived (connection error, timeout).
    status: int | None = None
    error: str | None = None
    #: Times the request was sent again on a fresh connection after a reused one failed
    #: before any response byte: 0 or 1. Timestamps are those of the last attempt.
    retries: int = 0
    #: The server's own ``meta_info`` timings (``streams.SERVER_TIME_KEYS``, SGLang with
    #: ``--enable-metrics``), as it reports them; ``None`` when it reported none.
    server_times: dict[str, float] | None = None
    #: Prompt tokens the server found in its prefix cache (``meta_info.cached_tokens``, or
    #: ``usage.prompt_tokens_details.cached_tokens`` with ``--enable-cache-report``); ``None``
    #: when it did not say.
    cached_tokens: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the request completed without an error."""
        return self.error is None

    def fail(self, message: str) -> None:
        """Record ``message`` as the error unless one is already: the first is the cause."""
        if self.error is None:
            self.error = message

    @property
    def first_token(self) -> float | None:
        """When the first chunk with generated tokens arrived (``None`` without streaming)."""
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def ttft(self) -> float | None:
        """Time to first token in seconds: request sent to first chunk with tokens."""
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        """End-to-end latency in seconds: request sent to response complete."""
        return None if self.end is None else self.end - self.sent

    @property
    def output_tokens(self) -> int | None:
        """Generated tokens: the server's count, else the client's."""
        server = self.output_tokens_server
        return self.output_tokens_client if server is None else server

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: ``(e2e - ttft) / (tokens - 1)``."""
        ttft, e2e, tokens = self.ttft, self.e2e, self.output_tokens
        if ttft is None or e2e is None or tokens is None or tokens < 2:
            return None
        return (e2e - ttft) / (tokens - 1)

    @property
    def gaps(self) -> list[tuple[float, int]]:
        """``(seconds, tokens)`` per chunk after the first: its gap and what it carried (ITL)."""
        times = self.chunk_times
        return list(zip(map(operator.sub, times[1:], times), self.chunk_tokens[1:], strict=False))

    def shifted(self, by: float) -> RequestRecord:
        """Return a copy with every timestamp moved by ``by`` seconds (another clock or origin)."""
        scheduled, end = self.scheduled, self.end
        return replace(
            self,
            started=self.started + by,
            sent=self.sent + by,
            scheduled=None if scheduled is None else scheduled + by,
            end=None if end is None else end + by,
            chunk_times=[t + by for t in self.chunk_times],
        )

    def as_dict(self, origin: float = 0.0) -> dict[str, Any]:
        """Return plain JSON types, with every timestamp relative to ``origin``."""
        return asdict(self.shifted(-origin))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestRecord:
        """Rebuild a record from :meth:`as_dict` output (newer fields take their defaults)."""
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class LoadRun:
    """One run of a workload under one load: every record, warm-up ones first.

    ``load`` is how its requests arrived (a closed loop, or an open loop's schedule);
    ``started`` is the ``perf_counter`` origin of the run.
    """

    workload: Workload
    load: Load
    records: tuple[RequestRecord, ...]
    started: float
    repeat: int = 0
    #: The client's own CPU and event-loop lag over the measured requests (None: not
    #: watched, e.g. a run that never reached its measured phase).
    client: ClientLoad | None = None

    def shifted(self, by: float) -> LoadRun:
        """Return a copy with every timestamp moved by ``by`` seconds (onto another clock)."""
        return replace(
            self, started=self.started + by, records=tuple(r.shifted(by) for r in self.records)
        )

    @property
    def measured(self) -> tuple[RequestRecord, ...]:
        """The measured records (warm-up excluded), in request order."""
        return tuple(r for r in self.records if not r.warmup)

    @property
    def warmup_records(self) -> tuple[RequestRecord, ...]:
        """The warm-up records, in request order."""
        return tuple(r for r in self.records if r.warmup)


@dataclass
class ConnectionHabits:
    """Whether a server keeps connections open between requests (``None``: not known yet)."""

    #: ``True``: the server closes connections after a response (a fresh one per request);
    #: ``False``: a connection was reused for a second request; ``None``: not known yet.
    closes_after_response: bool | None = None
    #: What showed it, for the report and for messages.
    evidence: str = ""

    def closes(self, evidence: str) -> None:
        """Note that the server closed a connection after a response."""
        if self.closes_after_response is not True:
            self.closes_after_response = True
            self.evidence = evidence

    def keeps(self, evidence: str) -> None:
        """Note that a connection served a second request (unless a close was seen)."""
        if self.closes_after_response is None:
            self.closes_after_response = False
            self.evidence = evidence
