"""An OpenAI-compatible stand-in with cpp-httplib's socket habits (llama.cpp's HTTP server).

One thread per connection with blocking sockets; a request is read only when the thread is
ready for it; the stream's closing pieces (finish chunk with usage, ``[DONE]``, the chunked
terminator) are separate small writes; Nagle's algorithm stays on (cpp-httplib leaves
``TCP_NODELAY`` off) unless ``--nodelay``; the connection is closed ``--close-delay-ms``
after each stream although the response advertised keep-alive. ``--abort`` closes with
``SO_LINGER`` 0, a TCP reset: Linux then discards what the server had not yet sent, which is
how a finished stream loses its last bytes (``benchmarks/reset_tail.py``).

    python -m tests.servers.httplib_like --port P [--token-ms 1] [--close-delay-ms 1]
        [--abort] [--nodelay]
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from typing import Any


def _read_request(conn: socket.socket, buffered: bytes) -> tuple[str, bytes, bytes] | None:
    """Read one request: (path, body, bytes after it), or None at the end of the stream."""
    while b"\r\n\r\n" not in buffered:
        data = conn.recv(65536)
        if not data:
            return None
        buffered += data
    head, rest = buffered.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    return lines[0].split(" ")[1], rest[:length], rest[length:]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(chat: bool, text: str | None, usage: dict[str, int] | None = None) -> bytes:
    choice: dict[str, Any] = {"index": 0, "finish_reason": None if text else "length"}
    if chat:
        choice["delta"] = {"content": text} if text else {}
    else:
        choice["text"] = text or ""
    event: dict[str, Any] = {"id": "x", "created": 1, "model": "m", "choices": [choice]}
    event["object"] = "chat.completion.chunk" if chat else "text_completion"
    if usage:
        event["usage"] = usage
    return _chunk(b"data: " + json.dumps(event).encode() + b"\n\n")


def _serve(conn: socket.socket, args: argparse.Namespace) -> None:
    if args.nodelay:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buffered = b""
    try:
        while (request := _read_request(conn, buffered)) is not None:
            path, body, buffered = request
            if not path.endswith("completions"):
                data = json.dumps({"object": "list", "data": [{"id": "m"}]}).encode()
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                conn.sendall(head + b"Content-Length: %d\r\n\r\n%s" % (len(data), data))
                continue
            fields = json.loads(body or b"{}")
            chat = path.endswith("chat/completions")
            tokens = int(fields.get("max_tokens") or fields.get("max_completion_tokens") or 16)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n"
                         b"Keep-Alive: timeout=5, max=100\r\n\r\n")  # fmt: skip
            for _ in range(tokens):
                conn.sendall(_event(chat, " a"))
                time.sleep(args.token_ms / 1000)
            usage = {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": tokens + 8}
            conn.sendall(_event(chat, None, usage))
            conn.sendall(_chunk(b"data: [DONE]\n\n"))
            conn.sendall(b"0\r\n\r\n")
            time.sleep(args.close_delay_ms / 1000)
            break
    except OSError:
        pass
    finally:
        if args.abort:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        conn.close()


def main() -> None:
    """Serve until terminated; print ``ready`` once listening."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--token-ms", type=float, default=1.0)
    parser.add_argument("--close-delay-ms", type=float, default=1.0)
    parser.add_argument("--abort", action="store_true")
    parser.add_argument("--nodelay", action="store_true")
    args = parser.parse_args()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(128)
    sys.stdout.write("ready\n")  # the parent waits for this line
    sys.stdout.flush()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_serve, args=(conn, args), daemon=True).start()


if __name__ == "__main__":
    main()
