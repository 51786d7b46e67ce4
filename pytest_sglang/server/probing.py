"""The readiness gate's probes: a whole, bounded answer in time, and the scheme a port speaks."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any

from pytest_sglang.loadgen.jsoncodec import MAX_BODY_BYTES, UnsafeBody

if TYPE_CHECKING:
    import httpx

__all__ = ["HeldInterrupts", "Prober", "Seen", "held_interrupts", "tls_failure"]

#: OpenSSL's reasons when the peer of a TLS handshake answered bytes that are no TLS record
#: (an HTTP answer to the ClientHello).
_NOT_TLS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
            "UNKNOWN_PROTOCOL", "HTTP_REQUEST")  # fmt: skip
_BODY_SNIPPET = 300


@dataclass
class Seen:
    """What one ``GET`` probe got: a response or a transport error, for failure messages."""

    path: str
    at: float
    status: int | None = None
    body: str = ""
    error: str | None = None
    #: The response's ``Server`` header, if any (recognises engines that are not SGLang).
    server: str | None = None

    def describe(self) -> str:
        """Return the probe in one line: ``GET /ready -> 503 with empty body (at 1.20s)``."""
        where = f"GET {self.path}"
        if self.error is not None:
            return f"{where}: {self.error} (at {self.at:.2f}s)"
        body = repr(self.body[:_BODY_SNIPPET]) if self.body else "empty body"
        if len(self.body) > _BODY_SNIPPET:
            body += f" … ({len(self.body)} bytes)"
        return f"{where} -> {self.status} with {body} (at {self.at:.2f}s)"


class Prober:
    """Runs probes on ``runner``'s event loop, from the gate's blocking code."""

    def __init__(self, runner: asyncio.Runner) -> None:
        self._runner = runner
        #: Whether the latest :meth:`get` opened a TCP connection (the port accepts them).
        self.connected = False

    def get(self, client: httpx.AsyncClient, path: str, limit: float) -> httpx.Response:
        """GET ``path``: the whole answer within ``limit`` s, its body under ``MAX_BODY_BYTES``.

        :raises TimeoutError: no complete answer in time (a dribbling server included).
        :raises UnsafeBody: a body over ``MAX_BODY_BYTES``.
        """
        self.connected = False
        return self._runner.run(self._fetch(client, path, limit))

    async def _fetch(self, client: httpx.AsyncClient, path: str, limit: float) -> httpx.Response:
        import httpx

        async def trace(event: str, info: dict[str, Any]) -> None:
            if event == "connection.connect_tcp.complete":
                self.connected = True

        async with asyncio.timeout(limit):
            request = client.build_request("GET", path, timeout=limit, extensions={"trace": trace})
            response = await client.send(request, stream=True)
            try:
                body = bytearray()
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > MAX_BODY_BYTES:
                        raise UnsafeBody(f"a body of more than {MAX_BODY_BYTES} bytes")
            finally:
                await response.aclose()
        # The answer as read, its body already decoded (hence no Content-Encoding).
        headers = [(k, v) for k, v in response.headers.multi_items() if k != "content-encoding"]
        return httpx.Response(
            response.status_code, headers=headers, content=bytes(body), request=request
        )

    def speaks_tls(self, host: str, port: int, limit: float) -> bool:
        """Whether a TLS handshake with ``host:port`` completes in ``limit`` s (any certificate)."""
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE

        async def handshake() -> bool:
            try:
                async with asyncio.timeout(limit):
                    _, writer = await asyncio.open_connection(host, port, ssl=context)
            except (OSError, TimeoutError):  # ssl.SSLError is an OSError
                return False
            writer.close()
            return True

        return self._runner.run(handshake())


def tls_failure(exc: BaseException, url: httpx.URL) -> str | None:
    """Say what a failed TLS handshake with an ``https://`` URL means, and the fix; else None."""
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, ssl.SSLError):
        cause = cause.__cause__ or cause.__context__
    if cause is None or url.scheme != "https":
        return None
    reason = str(getattr(cause, "reason", None) or cause)
    if reason in _NOT_TLS:
        fix = f"the server speaks plain HTTP there; use {url.copy_with(scheme='http')}"
    elif reason == "CERTIFICATE_VERIFY_FAILED":
        fix = (
            "the server's certificate is not trusted here (self-signed, or another host's); "
            "give it a certificate from a CA in certifi's bundle, or reach the server over "
            "http:// where the network is trusted"
        )
    else:
        fix = "check that this port serves TLS, and the server's TLS configuration"
    return f"the TLS handshake with {url.host}:{url.port or 443} failed ({cause}): {fix}"


class HeldInterrupts:
    """SIGINT (and SIGTERM, which runs SIGINT's handler) noted while held, not raised at once.

    A ``KeyboardInterrupt`` raised wherever the main thread happens to be can be lost: in a
    finalizer (``__del__``, the weakref callback asyncio runs as each ``Runner.run`` ends) it
    is printed as "Exception ignored" and dropped; raised inside an event loop's own code it
    can leave ``Runner.close`` waiting forever. Held, a signal cancels the tasks of ``loop``
    (the probe in flight) from a loop callback, and :meth:`check`, called between a loop's
    steps, raises the ``KeyboardInterrupt`` where it propagates.
    """

    def __init__(self) -> None:
        self.came = False
        #: The event loop whose tasks a signal cancels (the gate's runner's).
        self.loop: asyncio.AbstractEventLoop | None = None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self.came = True
        loop = self.loop
        if loop is not None and loop.is_running():
            loop.call_soon_threadsafe(_cancel_all, loop)

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if SIGINT or SIGTERM came while held."""
        if self.came:
            raise KeyboardInterrupt


def _cancel_all(loop: asyncio.AbstractEventLoop) -> None:
    for task in asyncio.all_tasks(loop):
        task.cancel()


@contextlib.contextmanager
def held_interrupts() -> Iterator[HeldInterrupts]:
    """Hold Ctrl-C and SIGTERM over the block (main thread only; see :class:`HeldInterrupts`).

    An interrupt that came ends the block with ``KeyboardInterrupt``, whatever else ended it
    (the ``CancelledError`` of the probe it cancelled, a failure it provoked).
    """
    held = HeldInterrupts()
    previous = signal.getsignal(signal.SIGINT)
    # Signals reach the main thread only (it raises there, not here); an ignored SIGINT
    # stays ignored; a handler installed outside Python could not be put back.
    if threading.current_thread() is not threading.main_thread() or not callable(previous):
        yield held
        return
    signal.signal(signal.SIGINT, held._note)
    try:
        yield held
    except BaseException:
        if not held.came:
            raise
    finally:
        signal.signal(signal.SIGINT, previous)
    held.check()
