"""Response parsers for the three endpoints: they fill a :class:`RequestRecord` (pure, no I/O).

A streaming parser is fed the body's bytes as they arrive, with their arrival time;
:meth:`StreamParser.finish` ends the body. Failures (an error event, ``finish_reason``
abort, a malformed event, a stream without ``[DONE]`` or a final chunk, a negative token
count) go to ``record.error``, never raised. How each chunk's tokens are counted, per
endpoint, is in ``docs/metrics.md`` ("Token counts").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pytest_sglang.loadgen.jsoncodec import UnsafeBody, loads, loads_body
from pytest_sglang.loadgen.progress import Tally
from pytest_sglang.loadgen.records import RequestRecord
from pytest_sglang.loadgen.sse import SSEDecoder

__all__ = [
    "SERVER_TIME_KEYS",
    "ChatStreamParser",
    "CompletionsStreamParser",
    "NativeStreamParser",
    "StreamParser",
    "describe_http_error",
    "parse_body",
    "read_server_times",
    "stream_parser",
]

_DONE = b"[DONE]"
# How much of an unexpected body an error message quotes.
_QUOTE = 300


class StreamParser:
    """SSE framing, ``[DONE]`` and error events; subclasses read the endpoint's JSON events."""

    def __init__(self, record: RequestRecord, tally: Tally | None = None) -> None:
        self.record = record
        self._tally = tally if tally is not None else Tally(0)
        self._sse = SSEDecoder()
        #: Arrival time of ``data: [DONE]``; ``None`` until it arrives.
        self.done_at: float | None = None
        self._final_seen = False
        self._events = 0
        self._head = b""
        #: Arrival of the first SSE event (``perf_counter``): a stream that has sent one is
        #: past the server's queue, and the stall watchdog measures its silence from it
        #: until a token comes.
        self.first_event: float | None = None

    def feed(self, chunk: bytes, now: float) -> None:
        """Parse ``chunk`` of the body, which arrived at ``now`` (``perf_counter``)."""
        if len(self._head) < _QUOTE:
            self._head += chunk[:_QUOTE]
        for payload in self._sse.feed(chunk):
            self._payload(payload, now)

    def finish(self, now: float) -> None:
        """End the body at ``now``: check the stream was complete and settle the counts."""
        for payload in self._sse.close():
            self._payload(payload, now)
        record = self.record
        if record.error is None:
            if self.done_at is None:
                if self._events == 0:
                    head = self._head.decode("utf-8", "replace").strip()
                    record.error = (
                        f"the response had no SSE events (is the server streaming?); "
                        f"body starts {head!r}"
                    )
                else:
                    record.error = f"stream ended before 'data: [DONE]' after {self._events} events"
            elif not self._final_seen:
                record.error = "stream ended without a final chunk (no finish_reason)"
        self._settle_counts()

    def _payload(self, payload: bytes, now: float) -> None:
        if self.done_at is not None:
            return
        if not self._events:
            self.first_event = now
        self._events += 1
        if payload == _DONE:
            self.done_at = now
            return
        try:
            event = loads(payload)
        except ValueError:
            self._fail(f"malformed JSON event: {_quote(payload)}")
            return
        if not isinstance(event, dict):
            self._fail(f"unexpected event (not a JSON object): {_quote(payload)}")
            return
        # Two lookups instead of a call per event: error events are rare, chunks are not.
        if "error" in event or event.get("object") == "error":
            self._fail(f"error event in stream: {_error_message(event)}")
            return
        self._event(event, now)

    def _fail(self, message: str) -> None:
        # The first failure is the cause; later ones are usually its consequences.
        if self.record.error is None:
            self.record.error = message

    def _tokens(self, count: int, now: float) -> None:
        self.record.chunk_times.append(now)
        self.record.chunk_tokens.append(count)
        self._tally.tokens += count

    def _event(self, event: dict[str, Any], now: float) -> None:
        raise NotImplementedError

    def _settle_counts(self) -> None:
        raise NotImplementedError


class NativeStreamParser(StreamParser):
    """``POST /generate`` with ``stream: true``: cumulative ``meta_info`` per chunk."""

    def __init__(self, record: RequestRecord, tally: Tally | None = None) -> None:
        super().__init__(record, tally)
        self._completion_tokens = 0
        self._counted = True
        self._ids_last: int | None = None
        self._ids_sum = 0

    def _event(self, event: dict[str, Any], now: float) -> None:
        meta = event.get("meta_info")
        if not isinstance(meta, dict):
            meta = {}
        ids = event.get("output_ids")
        if isinstance(ids, list):
            self._ids_last = len(ids)
            self._ids_sum += len(ids)
        cumulative = meta.get("completion_tokens")
        bad = _negative_count(meta, "meta_info")
        if bad is not None:
            self._fail(bad)
            return
        if isinstance(cumulative, int):
            new = cumulative - self._completion_tokens
            if new > 0:
                self._completion_tokens = cumulative
                self._tokens(new, now)
        elif event.get("text"):
            # No count from the server (never seen on SGLang): one token per chunk with text.
            self._counted = False
            self._tokens(1, now)
        if self.record.prompt_tokens is None:
            # The first chunk: it carries the scheduler's queue and prefill times.
            self.record.prompt_tokens = _int_or_none(meta.get("prompt_tokens"))
            read_server_times(self.record, meta)
        finish = meta.get("finish_reason")
        if finish is not None:
            self._final(meta, finish)

    def _final(self, meta: dict[str, Any], finish: Any) -> None:
        self._final_seen = True
        _read_final_meta(self.record, meta, finish, self._fail)
        read_server_times(self.record, meta)

    def _settle_counts(self) -> None:
        record = self.record
        record.chunk_tokens_exact = self._counted
        if self._ids_last is not None:
            record.output_tokens_client = _ids_count(
                self._ids_last, self._ids_sum, record.output_tokens_server
            )


class _OpenAIStreamParser(StreamParser):
    """The OpenAI chunk stream: text deltas, optional per-chunk usage, the usage chunk."""

    def __init__(self, record: RequestRecord, tally: Tally | None = None) -> None:
        super().__init__(record, tally)
        self._cumulative = 0
        self._per_chunk_counts = True
        #: Whether a chunk with text carried a ``usage``: the server sends running usage.
        self._running = False

    def _has_text(self, choice: dict[str, Any]) -> bool:
        raise NotImplementedError

    def _event(self, event: dict[str, Any], now: float) -> None:
        record = self.record
        choices = event.get("choices")
        usage = event.get("usage")
        if not isinstance(usage, dict):
            usage = None
        if choices:
            choice = choices[0]
            has_text = self._has_text(choice)
            running = None if usage is None else usage.get("completion_tokens")
            if isinstance(running, int) and running < 0:
                self._fail(_negative("usage.completion_tokens", running))
                return
            # A usage is a running count only once a chunk with text carried one: a usage
            # on a text-less finish chunk of a stream without running usage is the final
            # count (llama.cpp puts it there, with no usage chunk), never a chunk of tokens.
            if isinstance(running, int) and (has_text or self._running):
                self._running = self._running or has_text
                new = running - self._cumulative
                if new > 0:
                    self._cumulative = running
                    self._tokens(new, now)
            elif has_text:
                self._per_chunk_counts = False
                self._tokens(1, now)
            finish = choice.get("finish_reason")
            if finish is not None:
                self._final_seen = True
                record.finish_reason = str(finish)
                if finish == "abort":
                    self._fail("the server aborted the request (finish_reason 'abort')")
                if usage is not None:
                    self._final_usage(usage)
            meta = choice.get("meta_info")  # chat with return_meta_info: the native meta_info
            if isinstance(meta, dict) and meta.get("finish_reason") is not None:
                record.spec_verify_ct = _int_or_none(meta.get("spec_verify_ct"))
                read_server_times(record, meta)
        elif usage is not None:
            self._final_usage(usage)  # the separate usage chunk (``choices: []``)
        sglext = event.get("sglext")
        if isinstance(sglext, dict):
            details = sglext.get("spec_tokens_details")
            if isinstance(details, dict) and "spec_verify_ct" in details:
                record.spec_verify_ct = _int_or_none(details.get("spec_verify_ct"))

    def _final_usage(self, usage: dict[str, Any]) -> None:
        # The finish chunk's usage and a later usage chunk say the same; the last one wins.
        bad = _read_usage(self.record, usage)
        if bad is not None:
            self._fail(bad)

    def _settle_counts(self) -> None:
        record = self.record
        if self._per_chunk_counts:
            record.output_tokens_client = self._cumulative if record.chunk_times else 0
            return
        record.output_tokens_client = None
        total = record.output_tokens_server
        chunks = len(record.chunk_tokens)
        if total is None or total == chunks:
            # Equal counts prove one token per chunk; without a total nothing is known.
            record.chunk_tokens_exact = total is not None
            return
        record.chunk_tokens_exact = False
        if chunks and total >= chunks:
            record.chunk_tokens[:] = _spread(total, chunks)


class CompletionsStreamParser(_OpenAIStreamParser):
    """``POST /v1/completions`` with ``stream: true``: ``choices[0].text`` deltas."""

    def _has_text(self, choice: dict[str, Any]) -> bool:
        return bool(choice.get("text"))


class ChatStreamParser(_OpenAIStreamParser):
    """``POST /v1/chat/completions`` with ``stream: true``: ``choices[0].delta`` deltas."""

    def _has_text(self, choice: dict[str, Any]) -> bool:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        # Reasoning models stream their thinking as reasoning_content: generated tokens too.
        return bool(delta.get("content") or delta.get("reasoning_content"))


_PARSERS: dict[str, type[StreamParser]] = {
    "generate": NativeStreamParser,
    "completions": CompletionsStreamParser,
    "chat": ChatStreamParser,
}


def stream_parser(endpoint: str, record: RequestRecord, tally: Tally | None = None) -> StreamParser:
    """Return the streaming parser for ``endpoint`` (``generate``, ``completions``, ``chat``)."""
    return _PARSERS[endpoint](record, tally)


def parse_body(endpoint: str, record: RequestRecord, body: bytes) -> None:
    """Fill ``record`` from a complete non-streamed response body (status 200)."""
    try:
        data = loads_body(body)
    except UnsafeBody as exc:
        record.error = f"unusable JSON response: {exc}"
        return
    except ValueError:
        record.error = f"malformed JSON response: {_quote(body)}"
        return
    if isinstance(data, list) and data and endpoint == "generate":
        data = data[0]  # a batch answers a list; we send single prompts
    if not isinstance(data, dict):
        record.error = f"unexpected response (not a JSON object): {_quote(body)}"
        return
    message = _error_message(data)
    if message is not None:
        record.error = f"error response: {message}"
        return
    if endpoint == "generate":
        meta = data.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        bad = _negative_count(meta, "meta_info")
        if bad is not None:
            record.error = bad
            return
        record.prompt_tokens = _int_or_none(meta.get("prompt_tokens"))
        ids = data.get("output_ids")
        if isinstance(ids, list):
            record.output_tokens_client = len(ids)

        def fail(message: str) -> None:
            record.error = message

        _read_final_meta(record, meta, meta.get("finish_reason"), fail)
        read_server_times(record, meta)
        return
    usage = data.get("usage")
    if isinstance(usage, dict):
        bad = _read_usage(record, usage)
        if bad is not None:
            record.error = bad
            return
    choices = data.get("choices")
    if choices and isinstance(choices[0], dict):
        finish = choices[0].get("finish_reason")
        record.finish_reason = None if finish is None else str(finish)
        if finish == "abort":
            record.error = "the server aborted the request (finish_reason 'abort')"


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


def read_server_times(record: RequestRecord, meta: dict[str, Any]) -> None:
    """Keep ``meta``'s server timings in ``record.server_times`` (the first value of each)."""
    times = record.server_times
    for key in SERVER_TIME_KEYS:
        value = meta.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if times is None:
                times = record.server_times = {}
            times.setdefault(key, float(value))


def describe_http_error(status: int, body: bytes) -> str:
    """Return a one-line message for an HTTP error response (any of SGLang's envelopes)."""
    message: str | None = None
    try:
        data = loads_body(body)
    except ValueError:  # UnsafeBody included: the raw text is quoted instead
        data = None
    if isinstance(data, dict):
        message = _error_message(data)
    if message is None:
        text = body.decode("utf-8", "replace").strip()
        message = text[:_QUOTE] if text else "(empty body)"
    return f"HTTP {status}: {message}"


def _error_message(data: dict[str, Any]) -> str | None:
    # SGLang's envelopes: native {"error": "text"} (contract errors) or
    # {"error": {"message": ...}}; OpenAI {"object": "error", "message": ...}; FastAPI's
    # {"detail": ...}. A normal response has none of these keys.
    error = data.get("error")
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        return str(error.get("message", error))
    if data.get("object") == "error":
        return str(data.get("message", data))
    if "detail" in data and len(data) == 1:
        return str(data["detail"])
    return None


def _read_usage(record: RequestRecord, usage: dict[str, Any]) -> str | None:
    """Read an OpenAI final ``usage`` into ``record``; return why it cannot be right, or None."""
    bad = _negative_count(usage, "usage")
    if bad is not None:
        return bad
    completion = _int_or_none(usage.get("completion_tokens"))
    if completion is not None:
        record.output_tokens_server = completion
    prompt = _int_or_none(usage.get("prompt_tokens"))
    if prompt is not None:
        record.prompt_tokens = prompt
    # prompt_tokens_details.cached_tokens: null without the server's cache reports.
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict):
        cached = _int_or_none(details.get("cached_tokens"))
        if cached is not None:
            record.cached_tokens = cached
    return None


def _read_final_meta(
    record: RequestRecord, meta: dict[str, Any], finish: Any, fail: Callable[[str], None]
) -> None:
    """Read what the final native ``meta_info`` carries: counts, spec stats, finish reason."""
    record.output_tokens_server = _int_or_none(meta.get("completion_tokens"))
    record.spec_verify_ct = _int_or_none(meta.get("spec_verify_ct"))
    cached = _int_or_none(meta.get("cached_tokens"))
    if cached is not None:
        record.cached_tokens = cached
    if isinstance(finish, dict):
        kind = finish.get("type")
        record.finish_reason = None if kind is None else str(kind)
        if kind == "abort":
            fail(f"the server aborted the request: {finish.get('message', finish)}")
    elif finish is not None:
        record.finish_reason = str(finish)


def _ids_count(last: int, total: int, server: int | None) -> int:
    # Cumulative streams repeat all ids in every chunk (the last list is the count);
    # incremental ones send each id once (the sum is). Take the one the server confirms.
    if server is not None and total == server and last != server:
        return total
    return last


def _spread(total: int, chunks: int) -> list[int]:
    """``total`` tokens over ``chunks`` chunks as evenly as integers allow (each >= 1)."""
    base, extra = divmod(total, chunks)
    return [base + (i >= chunks - extra) for i in range(chunks)]


def _negative(where: str, value: int) -> str:
    return (
        f"the server reported a negative token count ({where} {value}): no count of it "
        "can be trusted; check the server (or a proxy in between) and its usage reporting"
    )


def _negative_count(counts: dict[str, Any], where: str) -> str | None:
    """Return why ``counts`` (a usage or meta_info) cannot be right, or None."""
    for key in ("completion_tokens", "prompt_tokens"):
        value = _int_or_none(counts.get(key))
        if value is not None and value < 0:
            return _negative(f"{where}.{key}", value)
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _quote(data: bytes) -> str:
    return repr(data[:_QUOTE].decode("utf-8", "replace"))
