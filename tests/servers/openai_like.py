"""A tiny OpenAI-compatible streaming server with the habits of real ones, for the tests.

Raw asyncio HTTP/1.1 (no framework), so each habit is exact:

``--close-after-stream``
    close the TCP connection after every streamed response, a few milliseconds after its
    last byte, while advertising ``Connection: keep-alive`` and ``Keep-Alive: timeout=5,
    max=100`` (llama.cpp's server does this; so do proxies): a pooled client that reuses the
    connection writes its next request into a socket about to be closed.
``--usage {chunk,finish,none,running}``
    where the final ``usage`` goes: a separate ``choices: []`` chunk (SGLang, vLLM), on the
    finish chunk with empty text and no usage chunk (llama.cpp, with its ``timings``),
    nowhere, or a running count on every chunk plus the usage chunk.
``--cut-after N``
    drop the connection after N tokens of every stream (a server failure mid-response).
``--stuck-usage``
    running usage that never counts up (0 on every chunk): text with no countable tokens.
``--overclaim N``
    stream N tokens fewer than asked for while the final ``usage`` claims all of them (a
    running count, ``--usage running``, counts what was streamed): a server whose final
    count is larger than what it streamed.
``--token-ms MS``, ``--tokens-per-write K``
    the pace of every stream (default 1 ms a token) and how many tokens go in one write
    (default 1), ``K`` tokens every ``K * MS``: the same rate for far fewer writes and
    timers. ``--token-ms 0``: unpaced, every response's tokens in one write. Responses are
    rendered once per shape, so a server with ``K`` of 16 or more, or unpaced, costs little
    CPU (a fast server for saturating a client on the same cores).

``--owned-by NAME``, ``--server-header VALUE``
    what its ``/v1/models`` says owns the model, and the ``Server`` header on every response
    (to look like vLLM, llama.cpp...). Every other GET (``/ready``, ``/health_generate``,
    ``/server_info``: SGLang's endpoints) answers 404, as a non-SGLang server does.
``--require-auth TOKEN``
    answer 401 unless ``Authorization: Bearer TOKEN`` comes with the request.

Frozen: stop the process (SIGSTOP); the kernel still accepts connections.

``GET /stats`` answers ``{"requests": n, "completion_tokens": n, "first_request": t,
"last_token": t}``: the server's own count of the tokens it streamed and when (``perf_counter``
of the first stream's start and the last token's write), to check a client's throughput
against; ``POST /stats/reset`` zeroes them. Run it as
``python -m tests.servers.openai_like --port P [...]``; it prints ``ready`` when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["main"]


class Server:
    """The server's behaviour and its own counts."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._rendered: dict[tuple[bool, int, int], list[tuple[bytes, int]]] = {}
        self.reset()

    def reset(self) -> None:
        """Forget the counts and times."""
        self.requests = 0
        self.completion_tokens = 0
        self.first_request: float | None = None
        self.last_token: float | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve requests on one connection until the client or the habit closes it."""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                token = self.args.require_auth
                authorized = headers.get("authorization") == f"Bearer {token}"
                if token and not authorized and "/stats" not in path:
                    await self._json(writer, {"error": "unauthorized"}, status=b"401 Unauthorized")
                    continue
                if method == "GET" and path == "/stats":
                    stats = {
                        "requests": self.requests,
                        "completion_tokens": self.completion_tokens,
                        "first_request": self.first_request,
                        "last_token": self.last_token,
                    }
                    await self._json(writer, stats)
                    continue
                if method == "POST" and path == "/stats/reset":
                    self.reset()
                    await self._json(writer, {})
                    continue
                if method == "GET" and path == "/health":
                    await self._json(writer, {"status": "ok"})
                    continue
                if method == "GET" and path == "/v1/models":
                    card: dict[str, Any] = {"id": "m", "object": "model", "created": 1}
                    if self.args.owned_by:
                        card["owned_by"] = self.args.owned_by
                    await self._json(writer, {"object": "list", "data": [card]})
                    continue
                if method == "GET":
                    await self._json(writer, {"detail": "Not Found"}, status=b"404 Not Found")
                    continue
                request = json.loads(body or b"{}")
                closing = await self._stream(writer, path, request)
                if closing or headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def _server(self) -> bytes:
        value = self.args.server_header
        return f"Server: {value}\r\n".encode() if value else b""

    async def _json(
        self, writer: asyncio.StreamWriter, data: dict[str, Any], status: bytes = b"200 OK"
    ) -> None:
        body = json.dumps(data).encode()
        writer.write(b"HTTP/1.1 %s\r\nContent-Type: application/json\r\n%s"
                     b"Content-Length: %d\r\n\r\n%s" % (status, self._server(), len(body),
                                                        body))  # fmt: skip
        await writer.drain()

    async def _stream(
        self, writer: asyncio.StreamWriter, path: str, request: dict[str, Any]
    ) -> bool:
        args = self.args
        chat = path.endswith("/chat/completions")
        tokens = int(request.get("max_tokens") or request.get("max_completion_tokens") or 16)
        self.requests += 1
        if self.first_request is None:
            self.first_request = time.perf_counter()
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n"
            b"Keep-Alive: timeout=5, max=100\r\n" + self._server() + b"\r\n"
        )
        # Cut streams go a token a write; unpaced ones, all tokens in one.
        per_write = 1 if args.cut_after is not None else args.tokens_per_write
        if not args.token_ms and args.cut_after is None:
            per_write = tokens
        key = (chat, tokens, per_write)
        groups = self._rendered.get(key)
        if groups is None:
            groups = self._rendered[key] = self._groups(chat, tokens, per_write)
        writer.write(head)
        sent = 0
        for data, count in groups:
            if count and sent and args.token_ms:  # the pace: the first tokens come at once
                await asyncio.sleep(args.token_ms * count / 1000)
            writer.write(data)
            if not count:
                continue  # the closing chunks follow the last token at once, as SGLang's do
            sent += count
            self.completion_tokens += count
            self.last_token = time.perf_counter()
            await writer.drain()
            if args.cut_after is not None and sent >= args.cut_after:
                writer.transport.abort()
                return True
        await writer.drain()
        if args.close_after_stream:
            # Close a moment after the last byte: the client has released the connection to
            # its pool and, in a closed loop, already written the next request into it.
            await asyncio.sleep(args.close_delay_ms / 1000)
            return True
        return False

    def _groups(self, chat: bool, tokens: int, per_write: int) -> list[tuple[bytes, int]]:
        """Return the body as writes, each with the tokens it carries.

        ``per_write`` tokens a write (the role chunk goes with the first), then the closing
        chunks alone. Rendered once per shape, so the server's CPU goes to writing, not to
        encoding JSON.
        """
        chunks = list(self._chunks(chat, tokens))
        last = max((i for i, (_, is_token) in enumerate(chunks) if is_token), default=-1)
        groups: list[tuple[bytes, int]] = []
        pending: list[bytes] = []
        count = 0
        for data, is_token in chunks[: last + 1]:
            pending.append(data)
            count += is_token
            if count == per_write:
                groups.append((b"".join(pending), count))
                pending, count = [], 0
        if pending:
            groups.append((b"".join(pending), count))
        if chunks[last + 1 :]:
            groups.append((b"".join(data for data, _ in chunks[last + 1 :]), 0))
        return groups

    def _chunks(self, chat: bool, tokens: int) -> Iterator[tuple[bytes, bool]]:
        """The response body's HTTP chunks, each with whether it carries a generated token."""
        args = self.args

        def encode(event: dict[str, Any] | str) -> bytes:
            payload = event if isinstance(event, str) else json.dumps(event)
            data = f"data: {payload}\n\n".encode()
            return b"%x\r\n%s\r\n" % (len(data), data)

        def chunk(
            text: str | None, finish: str | None, usage: dict[str, Any] | None
        ) -> dict[str, Any]:
            if chat:
                delta = {} if text is None else {"content": text}
                choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
            else:
                choice = {"index": 0, "text": text or "", "finish_reason": finish}
            kind = "chat.completion.chunk" if chat else "text_completion"
            event: dict[str, Any] = {"id": "x", "object": kind, "model": "m", "choices": [choice]}
            if usage is not None:
                event["usage"] = usage
            return event

        def usage(n: int) -> dict[str, int]:
            return {"prompt_tokens": 8, "completion_tokens": n, "total_tokens": 8 + n}

        running = args.usage == "running"
        claimed, tokens = tokens, max(tokens - args.overclaim, 0)
        if chat:
            yield encode(chunk("", None, usage(0) if running else None)), False  # role chunk
        for i in range(tokens):
            count = 0 if args.stuck_usage else i + 1
            event = chunk(f" w{i}", None, usage(count) if running or args.stuck_usage else None)
            yield encode(event), True
        final = usage(0 if args.stuck_usage else claimed)
        streamed = usage(0 if args.stuck_usage else tokens)  # the running count's last
        if args.usage == "finish":
            event = chunk("" if not chat else None, "length", final)
            event["timings"] = {"predicted_n": claimed, "predicted_ms": 1.0}
            yield encode(event), False
        else:
            finish = chunk(None if chat else "", "length", streamed if running else None)
            yield encode(finish), False
            if args.usage in ("chunk", "running"):
                tail = {"id": "x", "object": "x", "model": "m", "choices": [], "usage": final}
                yield encode(tail), False
        yield encode("[DONE]"), False
        yield b"0\r\n\r\n", False


async def serve(args: argparse.Namespace) -> None:
    """Listen on 127.0.0.1:``args.port`` until killed."""
    server = Server(args)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", args.port, backlog=1024)
    sys.stdout.write("ready\n")  # the parent waits for this line
    sys.stdout.flush()
    async with listener:
        await listener.serve_forever()


def main() -> None:
    """Parse the habits and serve."""
    parser = argparse.ArgumentParser(description="OpenAI-compatible test server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--close-after-stream", action="store_true")
    parser.add_argument("--close-delay-ms", type=float, default=20.0)
    parser.add_argument("--usage", choices=("chunk", "finish", "none", "running"), default="chunk")
    parser.add_argument("--stuck-usage", action="store_true")
    parser.add_argument("--overclaim", type=int, default=0)
    parser.add_argument("--cut-after", type=int, default=None)
    parser.add_argument("--token-ms", type=float, default=1.0)
    parser.add_argument("--tokens-per-write", type=int, default=1)
    parser.add_argument("--owned-by", default=None)
    parser.add_argument("--server-header", default=None)
    parser.add_argument("--require-auth", default=None)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
