"""Hostile input and hostile servers: a clear verdict, soon, with the right exit code (issue 24).

One table: each row feeds one bad input to an inner pytest session (a subprocess, so its
exit code and its wall time are real) and asserts

* the exit code (4: a usage error before any test; 1: the tests that met the fault failed);
* the message: a regex for what was wrong, where it came from and how to fix it;
* no ``Traceback`` and no ``INTERNALERROR`` anywhere in the output;
* the time to the verdict: generous for a loaded 2-core machine, far below what the same
  input cost before (a ready timeout waited out, a stream held for minutes);
* no process left behind: the inner session's children are all gone.

The hostile servers are written here, each a few lines on 127.0.0.1: a plain HTTP server
for an ``https://`` URL, a TLS server for an ``http://`` one, a model list nested thousands
of levels deep, a ``/ready`` that dribbles its answer a byte at a time, a stream that stops
after its first event and never sends ``[DONE]``. ``docs/faults.md`` says the same in words.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.faults.harness import wait_for

pytestmark = pytest.mark.slow

#: What a server-facing row's inner session runs: one test that needs the server.
SERVER_SUITE = """
def test_server(sglang_server):
    pass
"""

#: A streamed chat measurement (the stalling server is plain OpenAI-compatible).
STREAM_SUITE = """
from pytest_sglang import Workload

def test_measure(sglang_bench):
    sglang_bench("srv", Workload(input_len=8, output_len=4, requests=2, warmup=0,
                                 endpoint="chat"), concurrency=1, repeats=1)
"""

MODEL_CARD = {
    "id": "org/model", "object": "model", "created": 1, "owned_by": "sglang",
    "root": "org/model", "parent": None, "max_model_len": 4096,
}  # fmt: skip

Writer = asyncio.StreamWriter
Route = Callable[[str, Writer], Awaitable[None]]


# -- hostile servers ---------------------------------------------------------------------------


async def _answer(writer: Writer, status: int, body: bytes = b"", ctype: str = "json") -> None:
    head = (
        f"HTTP/1.1 {status} X\r\nContent-Type: application/{ctype}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()


async def _plain_warming(path: str, writer: Writer) -> None:
    """A plain-HTTP SGLang still warming up: 503 everywhere."""
    await _answer(writer, 503)


async def _deep_models(path: str, writer: Writer) -> None:
    """Healthy, but ``/v1/models`` nests a field 5,000 levels deep."""
    if path == "/v1/models":
        deep = "[" * 5000 + "]" * 5000
        card = json.dumps(MODEL_CARD)[:-1] + f', "x": {deep}}}'
        await _answer(writer, 200, f'{{"object": "list", "data": [{card}]}}'.encode())
    else:
        await _answer(writer, 200)


async def _slowloris(path: str, writer: Writer) -> None:
    """Every answer dribbles out one byte every 0.2 s and never ends."""
    writer.write(b"HTTP/1.1 200 OK\r\nX-Dribble: ")
    while True:
        writer.write(b"a")
        await writer.drain()
        await asyncio.sleep(0.2)


async def _stalling_stream(path: str, writer: Writer) -> None:
    """A plain OpenAI-compatible server whose chat streams stop after their first event."""
    if path == "/v1/models":
        await _answer(writer, 200, json.dumps({"object": "list", "data": [MODEL_CARD]}).encode())
        return
    if path != "/v1/chat/completions":
        await _answer(writer, 200)
        return
    event = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "org/model",
             "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}  # fmt: skip
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    data = b"data: " + json.dumps(event).encode() + b"\n\n"
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
    await writer.drain()
    await asyncio.Event().wait()  # never [DONE], never closed


@contextlib.contextmanager
def hostile_server(route: Route, tls: ssl.SSLContext | None = None) -> Iterator[int]:
    """Serve ``route`` on 127.0.0.1 (HTTP/1.1, keep-alive) in a thread; yield the port.

    A TLS ClientHello sent to a plain server gets what uvicorn and nginx answer to bytes
    that are no HTTP request: ``400 Bad Request``, and the connection closed.
    """

    writers: list[Writer] = []

    async def connection(reader: asyncio.StreamReader, writer: Writer) -> None:
        writers.append(writer)
        try:
            # Cancelled too: at shutdown, a connection held open (a stall) ends quietly.
            quiet = (OSError, asyncio.IncompleteReadError, ssl.SSLError, asyncio.CancelledError)
            with contextlib.suppress(*quiet):
                while True:
                    first = await reader.readexactly(1)
                    if first == b"\x16":  # a TLS handshake record
                        await _answer(writer, 400, b"Bad Request", "text")
                        break
                    head = first + await reader.readuntil(b"\r\n\r\n")
                    length = re.search(rb"(?i)content-length:\s*(\d+)", head)
                    if length:
                        await reader.readexactly(int(length.group(1)))
                    await route(head.split(b" ")[1].decode(), writer)
        finally:
            writer.close()

    async def shutdown() -> None:
        server.close()
        # Connections accepted just before the close start their tasks a turn later: cancel
        # until none is left. A TLS connection's close waits for the peer's close_notify:
        # abort every transport, and let them finish (connection_lost) on the next turns, so
        # that no socket is left for the garbage collector to warn about.
        for _ in range(5):
            await asyncio.sleep(0)
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for writer in writers:
                writer.transport.abort()
        await server.wait_closed()

    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(asyncio.start_server(connection, "127.0.0.1", 0, ssl=tls))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def tls_context(directory: Path) -> ssl.SSLContext:
    """Return a server context with a self-signed certificate for 127.0.0.1 (openssl)."""
    if shutil.which("openssl") is None:
        pytest.skip("making a self-signed certificate needs the openssl command")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out",
         str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


# -- the table -----------------------------------------------------------------------------------


#: Arranges one row's bad input: writes files into the inner session's directory, starts
#: its hostile server on the stack, and returns the inner session's arguments.
Arrange = Callable[[pytest.Pytester, contextlib.ExitStack], list[str]]


def _profiles_not_utf8(pytester: pytest.Pytester, stack: contextlib.ExitStack) -> list[str]:
    (pytester.path / "profiles.toml").write_bytes(
        b'[profiles.srv]\nmodel-path = "/models/caf\xe9"\n'  # Latin-1, as an old editor saves
    )
    return ["--sglang-profiles=profiles.toml"]


def _served(route: Route, url: str, *options: str, tls: bool = False) -> Arrange:
    def arrange(pytester: pytest.Pytester, stack: contextlib.ExitStack) -> list[str]:
        context = tls_context(pytester.path) if tls else None
        port = stack.enter_context(hostile_server(route, context))
        return [f"--sglang-url={url.format(port=port)}", *options]

    return arrange


def _given(*options: str) -> Arrange:
    return lambda pytester, stack: list(options)


@dataclass(frozen=True)
class Row:
    """One bad input and the verdict it must get."""

    id: str
    arrange: Arrange
    #: The inner session's exit code.
    code: int
    #: A regex the output must match (what, where from, how to fix).
    message: str
    #: Seconds from start to exit the inner session may take at most.
    within: float
    suite: str = SERVER_SUITE


ROWS = (
    # 5. tomllib raised UnicodeDecodeError: INTERNALERROR.
    Row("profiles-not-utf8", _profiles_not_utf8, 4,
        r"profiles\.toml: not UTF-8 text \(byte 0xe9 at offset \d+\)[^\n]*save it as UTF-8",
        within=20.0),
    # 6. urlsplit raised ValueError: INTERNALERROR.
    Row("url-unclosed-ipv6-bracket", _given("--sglang-url=http://[::1"), 4,
        r"--sglang-url: URL 'http://\[::1' is not a valid URL \(Invalid IPv6 URL\) \(from "
        r"--sglang-url on the command line\); [^\n]*http://\[::1\]:30000", within=20.0),
    # 7. httpx raised InvalidURL inside every test: a 260-line traceback each.
    Row("url-host-not-idna", _given("--sglang-url=http://gpu_hôst:30000"), 4,
        r"--sglang-url: URL 'http://gpu_hôst:30000' has a host name that cannot be used "
        r"\(Invalid IDNA hostname[^\n]*\) \(from --sglang-url on the command line\); "
        r"[^\n]*letters, digits",
        within=20.0),
    # 8. The TLS handshake failed on every probe until the ready timeout, blamed on readiness.
    Row("https-to-plain-http",
        _served(_plain_warming, "https://127.0.0.1:{port}", "--sglang-ready-timeout=60"), 1,
        r"phase 'connect' failed after [0-9.]+s: the TLS handshake with 127\.0\.0\.1:\d+ "
        r"failed \([^\n]*\): the server speaks plain HTTP there; use http://127\.0\.0\.1:\d+",
        within=25.0),
    Row("http-to-tls",
        _served(_plain_warming, "http://127.0.0.1:{port}", "--sglang-ready-timeout=60",
                tls=True), 1,
        r"phase 'connect' failed after [0-9.]+s: the server at 127\.0\.0\.1:\d+ speaks TLS "
        r"\(HTTPS\), not plain HTTP; use https://127\.0\.0\.1:\d+", within=25.0),
    # 9. json.loads raised RecursionError.
    Row("models-nested-5000-deep",
        _served(_deep_models, "http://127.0.0.1:{port}", "--sglang-ready-timeout=60"), 1,
        r"phase 'models' failed after [0-9.]+s: GET /v1/models returned JSON nested deeper "
        r"than \d+ levels", within=25.0),
    # 10. Each byte renewed the read timeout: the gate waited as long as the server dribbled.
    Row("ready-slowloris",
        _served(_slowloris, "http://127.0.0.1:{port}", "--sglang-ready-timeout=3s"), 1,
        r"phase 'connect' failed after [345]\.\d+s: not passed within the ready timeout of "
        r"3s \(from --sglang-ready-timeout on the command line\)[^\n]*\n"
        r"  last response: GET /ready: no answer within", within=25.0),
    # 11. Silent after its first event, the stream waited for the first-token timeout (90 s)
    # or, while other streams sent tokens, the request timeout (600 s).
    Row("stream-stalls-after-first-event",
        _served(_stalling_stream, "srv=openai+http://127.0.0.1:{port}",
                "-osglang_stall_timeout=1s"), 1,
        r"2 of 2 measured requests failed[\s\S]*2 x stalled: no new token for 1 s after "
        r"0 token chunks", within=40.0, suite=STREAM_SUITE),
)  # fmt: skip


def _children(before: frozenset[int] = frozenset()) -> list[str]:
    """Our live child processes, less those in ``before`` (other tests' session servers)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.pid not in before and child.status() != psutil.STATUS_ZOMBIE:
                found.append(f"pid {child.pid}: {' '.join(child.cmdline())[:160]}")
    return found


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_hostile_input(row: Row, pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inner=row.suite)
    before = frozenset(child.pid for child in psutil.Process().children(recursive=True))
    with contextlib.ExitStack() as stack:
        args = row.arrange(pytester, stack)
        started = time.monotonic()
        # Twice the bound: a row that hangs fails here, not at the suite's timeout.
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", *args, timeout=2 * row.within
        )
        elapsed = time.monotonic() - started
    output = result.stdout.str() + "\n" + result.stderr.str()
    assert "Traceback" not in output and "INTERNALERROR" not in output, output
    assert re.search(row.message, output), output
    assert result.ret == row.code, output
    assert elapsed < row.within, (elapsed, output)
    assert wait_for(lambda: not _children(before), 10.0), _children(before)
