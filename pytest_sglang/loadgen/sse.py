"""Server-sent events framing: bytes as they arrive in, event payloads out (pure, no I/O).

An event ends at a blank line; its payload is its ``data:`` lines joined with a newline.
Other fields and comments are ignored (SGLang sends none that matter). Linear in the
stream's size however reads cut it: an unfinished line is kept as pieces, joined once.
"""

from __future__ import annotations

__all__ = ["SSEDecoder"]


class SSEDecoder:
    """Incremental SSE decoder: :meth:`feed` bytes, get the completed events' payloads."""

    __slots__ = ("_data", "_more", "_pending")

    def __init__(self) -> None:
        # The unfinished line's pieces; data lines of the event being read: the first one,
        # and the rest (rare: a list only when an event has several data lines).
        self._pending: list[bytes] = []
        self._data: bytes | None = None
        self._more: list[bytes] | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add ``chunk`` and return the payloads of the events it completed, in order."""
        if b"\n" not in chunk:
            if chunk:
                self._pending.append(chunk)
            return []
        if self._pending:
            self._pending.append(chunk)
            buffer = b"".join(self._pending)
            self._pending.clear()
        else:
            buffer = chunk
        lines = buffer.split(b"\n")
        tail = lines.pop()
        if tail:
            self._pending.append(tail)
        events: list[bytes] = []
        # Inlined: a method call per line is a measurable share of the client's CPU.
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data is not None:
                    if self._more is not None:
                        data = b"\n".join([data, *self._more])
                        self._more = None
                    events.append(data)
                    data = None
            elif line.startswith(b"data:"):
                value = line[6:] if line.startswith(b"data: ") else line[5:]
                if data is None:
                    data = value
                elif self._more is None:
                    self._more = [value]
                else:
                    self._more.append(value)
        self._data = data
        return events

    def close(self) -> list[bytes]:
        """End of stream: return an event left without its closing blank line, if any.

        The specification drops such an event; keeping it is kinder to a server whose last
        ``data: [DONE]`` lacks the final newline, and the caller still sees it arrived last.
        """
        events: list[bytes] = []
        if self._pending:
            events += self.feed(b"\n")
        if self._data is not None:
            data = self._data
            if self._more is not None:
                data = b"\n".join([data, *self._more])
            events.append(data)
        self._data = self._more = None
        return events
