"""Kernel receive times of requests (``emulator.arrivals``), on real loopback sockets."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from pytest_sglang.emulator.engine.arrivals import (
    Arrivals,
    StampingConnection,
    kernel_stamps_supported,
)

pytestmark = pytest.mark.skipif(
    not kernel_stamps_supported(), reason="the kernel stamps received segments on Linux only"
)


def stamped_on_receive(
    arrivals: Arrivals, client: socket.socket, connection: StampingConnection
) -> None:
    """Wait until the kernel stamps segments when they arrive, not when they are read.

    Linux enables receive stamping from a work queue after the first socket asks for it;
    on a loaded machine a segment sent right away may be stamped at the read instead.
    """
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        client.sendall(b"GET /prime HTTP/1.1\r\n\r\n")
        time.sleep(0.02)
        read_at = time.monotonic()
        connection.recv(65536)
        stamp = arrivals.take(client.getsockname())
        if stamp is not None and stamp < read_at - 0.01:
            return
    pytest.fail("the kernel did not start stamping received segments within 5 s")


@pytest.fixture
def pair() -> Iterator[tuple[Arrivals, socket.socket, StampingConnection]]:
    """An arrivals registry, a client socket and the server's accepted connection."""
    arrivals = Arrivals()
    listener = arrivals.listening_socket(socket.AF_INET)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    connection, _ = listener.accept()
    assert isinstance(connection, StampingConnection)
    try:
        stamped_on_receive(arrivals, client, connection)
        yield arrivals, client, connection
    finally:
        for sock in (client, connection, listener):
            sock.close()


def test_a_request_is_stamped_when_it_arrived_not_when_it_was_read(
    pair: tuple[Arrivals, socket.socket, StampingConnection],
) -> None:
    arrivals, client, connection = pair
    before = time.monotonic()
    client.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\n\r\n")
    after = time.monotonic()
    time.sleep(0.05)  # the server's event loop is busy elsewhere
    assert connection.recv(65536).startswith(b"POST /generate")
    stamp = arrivals.take(client.getsockname())
    assert stamp is not None
    # A stamp taken at the read would be at least 50 ms after the send.
    assert before - 0.001 <= stamp <= after + 0.005


def test_only_a_read_that_starts_a_request_is_stamped(
    pair: tuple[Arrivals, socket.socket, StampingConnection],
) -> None:
    arrivals, client, connection = pair
    peer = client.getsockname()
    client.sendall(b'{"text": "a body segment"}')
    assert connection.recv(65536) == b'{"text": "a body segment"}'
    assert arrivals.take(peer) is None
    client.sendall(b"GET /health HTTP/1.1\r\n\r\n")
    connection.recv(65536)
    assert arrivals.take(peer) is not None
    assert arrivals.take(peer) is None  # taken once, never left for the next request


def test_take_without_a_client_address() -> None:
    assert Arrivals().take(None) is None
