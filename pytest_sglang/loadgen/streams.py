"""Response parsing for the three endpoints: it fills a :class:`RequestRecord` (pure, no I/O).

One parser per request reads a streamed body (fed bytes as they arrive, SSE-framed) or a whole
one; both go through the same event reader. Failures (an error event, ``finish_reason`` abort,
malformed JSON, a stream without ``[DONE]`` or a final chunk, a negative token count) go to
``record.error``, never raised. Token counting per endpoint: ``docs/metrics.md``.
"""

from __future__ import annotations

from typing import Any

from pytest_sglang.loadgen.jsoncodec import UnsafeBody, loads, loads_body
from pytest_sglang.loadgen.progress import Tally
from pytest_sglang.loadgen.records import RequestRecord

__all__ = ["SERVER_TIME_KEYS", "SSEDecoder", "StreamParser", "describe_http_error"]

# How much of an unexpected body an error message quotes.
_QUOTE = 300

#: ``meta_info`` timings SGLang reports with ``--enable-metrics`` (0.5.23;
#: ``srt/observability/req_time_stats.py``), kept in ``RequestRecord.server_times``.
SERVER_TIME_KEYS = (
    "queue_time",
    "forward_entry_time",
    "prefill_finished_time",
    "response_sent_to_client_ts",
    "request_received_ts",
    "api_server_dispatch_finish_ts",
    "first_token_latency",
    "request_finished_ts",
    "e2e_latency",
)


class SSEDecoder:
    """Incremental server-sent events decoder: :meth:`feed` bytes, get completed payloads.

    A payload is an event's ``data:`` lines joined by newlines; other fields are ignored.
    Linear however reads cut the stream: an unfinished line is kept as pieces, joined once.
    """

    __slots__ = ("_data", "_pending")

    def __init__(self) -> None:
        self._pending: list[bytes] = []  # the unfinished line's pieces
        self._data: list[bytes] = []  # the data lines of the event being read

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk`` and return the payloads of the events it completed, in order."""
        self._pending.append(chunk)
        if b"\n" not in chunk:
            return []
        lines = b"".join(self._pending).split(b"\n")
        tail = lines.pop()
        self._pending = [tail] if tail else []
        events: list[bytes] = []
        data = self._data
        for line in lines:  # inlined: a call per line is a measurable share of client CPU
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    events.append(b"\n".join(data))
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
        self._data = data
        return events

    def close(self) -> list[bytes]:
        """End of stream: also return an event left without its closing blank line.

        The specification drops it; keeping it is kinder to a last ``data: [DONE]`` without
        its final newline.
        """
        return self.feed(b"\n\n")


class StreamParser:
    """Reads one response of ``endpoint`` into ``record``: :meth:`feed` then :meth:`finish`."""

    def __init__(self, endpoint: str, record: RequestRecord, tally: Tally | None = None) -> None:
        self.record = record
        self._native = endpoint == "generate"
        self._delta = "delta" if endpoint == "chat" else None
        self._tally = tally if tally is not None else Tally(0)
        self._sse = SSEDecoder()
        self._events = 0
        self._head = b""
        self._final_seen = False
        self._counted = True  # every token chunk came with the server's count
        self._cumulative = 0  # the server's running count of generated tokens
        self._running = False  # an OpenAI chunk with text carried a usage: running usage
        self._ids: list[int] = []  # native: the length of each chunk's output_ids
        #: Arrival time of ``data: [DONE]``; ``None`` until it arrives.
        self.done_at: float | None = None
        #: Arrival of the first SSE event: the stall watchdog measures silence from it.
        self.first_event: float | None = None

    def feed(self, chunk: bytes, now: float) -> None:
        """Parse ``chunk`` of the body, which arrived at ``now`` (``perf_counter``)."""
        if len(self._head) < _QUOTE:
            self._head += chunk[:_QUOTE]
        self._read(self._sse.feed(chunk), now)

    def finish(self, now: float) -> None:
        """End the body at ``now``: check the stream was complete and settle the counts."""
        self._read(self._sse.close(), now)
        if self.done_at is None and self._events == 0:
            head = self._head.decode("utf-8", "replace").strip()
            self.record.fail(
                f"the response had no SSE events (is the server streaming?); body starts {head!r}"
            )
        elif self.done_at is None:
            self.record.fail(f"stream ended before 'data: [DONE]' after {self._events} events")
        elif not self._final_seen:
            self.record.fail("stream ended without a final chunk (no finish_reason)")
        self._settle()

    def whole(self, body: bytes) -> None:
        """Read a complete non-streamed body (status 200)."""
        self._decode(body, None)
        if self._native:
            self._settle()

    def _read(self, payloads: list[bytes], now: float) -> None:
        for payload in payloads:
            if self.done_at is not None:  # what follows [DONE] is ignored
                return
            if not self._events:
                self.first_event = now
            self._events += 1
            if payload == b"[DONE]":
                self.done_at = now
            else:
                self._decode(payload, now)

    def _decode(self, data: bytes, now: float | None) -> None:
        """Read one event, or a whole body (``now`` ``None``: it carries no token chunks)."""
        what = "event" if now is not None else "response"
        try:
            event = loads(data) if now is not None else loads_body(data)
        except UnsafeBody as exc:
            return self.record.fail(f"unusable JSON response: {exc}")
        except ValueError:
            return self.record.fail(f"malformed JSON {what}: {_quote(data)}")
        if isinstance(event, list) and event and self._native and now is None:
            event = event[0]  # a batch answers a list; we send single prompts
        if not isinstance(event, dict):
            return self.record.fail(f"unexpected {what} (not a JSON object): {_quote(data)}")
        # Two lookups instead of a call per event: error events are rare, chunks are not.
        if "error" in event or event.get("object") == "error" or "detail" in event:
            message = _error_message(event)
            if message is not None:
                error = "error event in stream" if now is not None else "error response"
                return self.record.fail(f"{error}: {message}")
        if not self._native and not isinstance(event.get("choices") or [], list):
            return self.record.fail(f"unexpected {what} ('choices' is not a list): {_quote(data)}")
        self._event(event, now)
        details = _dict(_dict(event.get("sglext")).get("spec_tokens_details"))
        if "spec_verify_ct" in details:  # SGLang's extension, on either API
            self.record.spec_verify_ct = _int_or_none(details["spec_verify_ct"])

    def _event(self, event: dict[str, Any], now: float | None) -> None:
        """Read one event's counts, text and finish (a whole body counts no token chunks)."""
        record = self.record
        if self._native:
            # Cumulative meta_info counts per chunk, the final one with the finish reason.
            counts = meta = _dict(event.get("meta_info"))
            ids = event.get("output_ids")
            if isinstance(ids, list):
                self._ids.append(len(ids))
            text, finish = bool(event.get("text")), meta.get("finish_reason")
            choice = True  # every native event is the answer's
        else:
            # Text deltas, optional running usage per chunk, a final usage on the finish chunk
            # or on a usage chunk of its own (``choices: []``, no choice: a chunk of no answer).
            counts, choices = _dict(event.get("usage")), event.get("choices") or [None]
            choice = isinstance(choices[0], dict)
            first = choices[0] if choice else {}
            delta = first.get(self._delta) if self._delta else first
            text = isinstance(delta, dict) and bool(
                delta.get("text") or delta.get("content") or delta.get("reasoning_content")
            )
            finish = first.get("finish_reason")
            meta = _dict(first.get("meta_info"))  # chat with return_meta_info: the native one
            meta = meta if meta.get("finish_reason") is not None else {}  # read at the end
        if self._negative(counts, "meta_info" if self._native else "usage"):
            return
        running = counts.get("completion_tokens")
        if now is not None:
            # OpenAI's usage is a running count only once a chunk with text carried one: a
            # usage on a text-less finish chunk of a stream without running usage is the
            # final count (llama.cpp puts it there, with no usage chunk), never a chunk.
            if isinstance(running, int) and choice and (self._native or text or self._running):
                self._running = self._running or text
                self._count(running, now)
            elif text:  # no count from the server: one token per chunk with text
                self._counted = False
                self._count(self._cumulative + 1, now)
        if self._native and record.prompt_tokens is None:  # the first chunk: queue, prefill
            record.prompt_tokens = _int_or_none(counts.get("prompt_tokens"))
            _read_server_times(record, meta)
        final = choice and (finish is not None or now is None)
        if final or not choice:  # the final counts (the last wins)
            details = _dict(counts.get("prompt_tokens_details"))
            totals = {
                "output_tokens_server": running,
                "prompt_tokens": counts.get("prompt_tokens"),
                # native meta_info.cached_tokens; OpenAI's is null without cache reports
                "cached_tokens": counts.get("cached_tokens", details.get("cached_tokens")),
            }
            for name, value in totals.items():
                if _int_or_none(value) is not None:
                    setattr(record, name, value)
        if final:
            self._final_seen = True
            kind = finish.get("type") if isinstance(finish, dict) else finish
            record.finish_reason = None if kind is None else str(kind)
            if kind == "abort":
                why = " (finish_reason 'abort')"  # native: a dict with the server's message
                why = f": {finish.get('message', finish)}" if isinstance(finish, dict) else why
                record.fail(f"the server aborted the request{why}")
            if meta:
                record.spec_verify_ct = _int_or_none(meta.get("spec_verify_ct"))
                _read_server_times(record, meta)

    def _settle(self) -> None:
        """Settle the client's count and the per-chunk counts once the body ended."""
        record = self.record
        if self._native:
            record.chunk_tokens_exact = self._counted
            if self._ids:
                # Cumulative streams repeat all ids in every chunk (the last list is the
                # count); incremental ones send each id once (the sum is): take the one the
                # server confirms.
                ids, server = sum(self._ids), record.output_tokens_server
                confirmed = server is not None and ids == server != self._ids[-1]
                record.output_tokens_client = ids if confirmed else self._ids[-1]
            return
        if self._counted:
            record.output_tokens_client = self._cumulative if record.chunk_times else 0
            return
        total, chunks = record.output_tokens_server, len(record.chunk_tokens)
        # Equal counts prove one token per chunk; without a total nothing is known; else the
        # total is spread as evenly as integers allow.
        record.chunk_tokens_exact = total == chunks
        if total is not None and chunks and total > chunks:
            base, extra = divmod(total, chunks)
            record.chunk_tokens[:] = [base + (i >= chunks - extra) for i in range(chunks)]

    def _count(self, cumulative: int, now: float) -> None:
        """Note a chunk of the tokens above the running count."""
        new = cumulative - self._cumulative
        if new > 0:
            self._cumulative = cumulative
            self.record.chunk_times.append(now)
            self.record.chunk_tokens.append(new)
            self._tally.tokens += new

    def _negative(self, counts: dict[str, Any], where: str) -> bool:
        """Fail the record when ``counts`` (a usage or meta_info) holds a negative count."""
        for key in ("completion_tokens", "prompt_tokens"):
            value = counts.get(key)
            if isinstance(value, int) and value < 0:  # a bool is never negative
                self.record.fail(
                    f"the server reported a negative token count ({where}.{key} {value}): no "
                    "count of it can be trusted; check the server (or a proxy in between) and "
                    "its usage reporting"
                )
                return True
        return False


def describe_http_error(status: int, body: bytes) -> str:
    """Return a one-line message for an HTTP error response (any of SGLang's envelopes)."""
    try:
        data = loads_body(body)
    except ValueError:  # UnsafeBody included: the raw text is quoted instead
        data = None
    message = _error_message(data) if isinstance(data, dict) else None
    if message is None:
        message = body.decode("utf-8", "replace").strip()[:_QUOTE] or "(empty body)"
    return f"HTTP {status}: {message}"


def _read_server_times(record: RequestRecord, meta: dict[str, Any]) -> None:
    """Keep ``meta``'s server timings in ``record.server_times`` (the first value of each)."""
    for key in SERVER_TIME_KEYS:
        value = meta.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if record.server_times is None:
                record.server_times = {}
            record.server_times.setdefault(key, float(value))


def _error_message(data: dict[str, Any]) -> str | None:
    # SGLang's envelopes: native {"error": "text"} or {"error": {"message": ...}}; OpenAI
    # {"object": "error", "message": ...}; FastAPI's {"detail": ...}.
    error = data.get("error")
    if error is not None:  # any other shape than these is an error still, said as it came
        return str(error.get("message", error) if isinstance(error, dict) else error)
    if data.get("object") == "error":
        return str(data.get("message", data))
    if "detail" in data and len(data) == 1:
        return str(data["detail"])
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quote(data: bytes) -> str:
    return repr(data[:_QUOTE].decode("utf-8", "replace"))
