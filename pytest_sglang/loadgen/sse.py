"""Server-sent events framing: bytes as they arrive in, event payloads out (pure, no I/O).

Network reads split the stream anywhere, inside a line or between CR and LF; the
decoder keeps the unfinished tail and completes it with the next read. An event ends at a
blank line; its payload is its ``data:`` field (several ``data:`` lines join with a newline, as
the SSE specification says). ``event:``, ``id:``, ``retry:`` fields and ``:`` comments are
ignored: SGLang sends none that matter.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Incremental SSE decoder: :meth:`feed` bytes, get the completed events' payloads."""

    __slots__ = ("_data", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk`` and return the payloads of the events it completed, in order."""
        buffer = self._tail + chunk if self._tail else chunk
        lines = buffer.split(b"\n")
        self._tail = lines.pop()
        events: list[bytes] = []
        # The per-line logic of _line, inlined: this loop runs for every event of every
        # stream, and a method call per line is a measurable share of the client's CPU.
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data is not None:
                    events.append(data)
                    data = None
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                data = value if data is None else data + b"\n" + value
        self._data = data
        return events

    def close(self) -> list[bytes]:
        """End of stream: return an event left without its closing blank line, if any.

        The specification drops such an event; keeping it is kinder to a server whose last
        ``data: [DONE]`` lacks the final newline, and the caller still sees it arrived last.
        """
        events: list[bytes] = []
        if self._tail:
            self._line(self._tail, events)
            self._tail = b""
        if self._data is not None:
            events.append(self._data)
            self._data = None
        return events

    def _line(self, line: bytes, events: list[bytes]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            if self._data is not None:
                events.append(self._data)
                self._data = None
            return
        if line.startswith(b"data:"):
            value = line[6:] if line.startswith(b"data: ") else line[5:]
            self._data = value if self._data is None else self._data + b"\n" + value
