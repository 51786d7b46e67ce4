"""When each HTTP request reached the server: the kernel's receive time (trace only, Linux).

The ground-truth trace (``--emulator-trace``) times a request from its arrival. The HTTP
layer cannot see the arrival: under a burst (a closed loop at C=64 sends 64 requests in the
same millisecond, right when the server is writing 64 responses' last chunks) the event loop
reads the last of them tens of milliseconds after they came in. That wait is the server's
latency, part of the TTFT a client sees; a trace that started at the HTTP layer would call it
the client's measurement error.

So the trace asks the kernel: ``SO_TIMESTAMPNS`` on the listening socket (accepted
connections inherit it) makes the kernel stamp every segment it receives, and reading with
``recvmsg`` returns the stamp with the data. :class:`StampingListener` is the socket uvicorn
serves on when a trace is written: it accepts :class:`StampingConnection` sockets, whose
``recv`` (the call asyncio's socket transport makes) keeps the stamp of each read that starts
an HTTP request, per client address, until the HTTP layer takes it (:meth:`Arrivals.take`).
One request is in flight per connection (HTTP/1.1 without pipelining), so a read that starts
with a method token is that request's first segment.

The stamp is ``CLOCK_REALTIME``; it is converted to ``time.monotonic()``, the trace's clock.
Where the kernel gives no stamp, the read's own time is kept (no earlier moment is known).
The kernel turns receive stamping on from a work queue once the first socket asks for it;
until that has run, a segment is stamped when it is read. The emulator's first requests
come long after its socket opened; a test that sends at once must wait for it.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Any

__all__ = ["Arrivals", "StampingConnection", "StampingListener", "kernel_stamps_supported"]

#: ``SO_TIMESTAMPNS`` (= ``SCM_TIMESTAMPNS``) on Linux; Python's socket module does not name
#: it. Its control message is a ``struct timespec`` (two longs on 64-bit Linux).
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SPACE = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
#: First bytes of an HTTP/1.1 request line (what a read starting a request begins with).
_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"OPTIONS ", b"PATCH ")

#: A client's address as the ASGI scope gives it: (host, port).
Peer = tuple[str, int]


def kernel_stamps_supported() -> bool:
    """Whether the kernel can stamp received segments for ``recvmsg`` (Linux)."""
    return sys.platform.startswith("linux") and _ANCILLARY_SPACE > 0


class Arrivals:
    """The latest unclaimed request arrival of each client address (``time.monotonic()``)."""

    def __init__(self) -> None:
        self._by_peer: dict[Peer, float] = {}

    def arrived(self, peer: Peer, when: float) -> None:
        """Note that a request from ``peer`` arrived at ``when``."""
        self._by_peer[peer] = when

    def take(self, peer: Peer | None) -> float | None:
        """Return and forget when ``peer``'s current request arrived (``None`` if unknown)."""
        if peer is None:
            return None
        return self._by_peer.pop(peer, None)

    def listening_socket(self, family: socket.AddressFamily) -> StampingListener:
        """Return an unbound TCP socket whose connections report arrivals here."""
        listener = StampingListener(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        listener.arrivals = self
        listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return listener


class StampingListener(socket.socket):
    """A listening socket that accepts :class:`StampingConnection` sockets."""

    arrivals: Arrivals

    def accept(self) -> tuple[socket.socket, Any]:
        """Accept a connection, as ``socket.accept`` does, as a :class:`StampingConnection`."""
        fd, address = self._accept()  # type: ignore[attr-defined]
        connection = StampingConnection(self.family, self.type, self.proto, fileno=fd)
        if socket.getdefaulttimeout() is None and self.gettimeout():
            connection.setblocking(True)
        connection.arrivals = self.arrivals
        connection.peer = (str(address[0]), int(address[1]))
        return connection, address


class StampingConnection(socket.socket):
    """An accepted connection whose ``recv`` notes when each request's first bytes arrived."""

    arrivals: Arrivals
    peer: Peer

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Read like ``socket.recv``; a read that starts a request notes its kernel stamp."""
        data, ancillary, _, _ = self.recvmsg(bufsize, _ANCILLARY_SPACE, flags)
        if data.startswith(_METHODS):
            self.arrivals.arrived(self.peer, _arrival_time(ancillary))
        return data


def _arrival_time(ancillary: list[tuple[int, int, bytes]]) -> float:
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
            # Realtime to monotonic with the offset read now: a clock step between the
            # segment's arrival and this read (microseconds) is the only error.
            return float(seconds + nanoseconds * 1e-9 - (time.time() - time.monotonic()))
    return time.monotonic()
