"""The ``hang`` fault's listener: accepts connections, reads requests, never answers.

This is the zombie the plugin must recognise: the port is open (a TCP connect succeeds), yet
every HTTP request times out. It runs on the socket uvicorn would have used, so the port opens at
the same point of the startup.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


async def serve_hang(sock: socket.socket, stop: asyncio.Event) -> None:
    """Hold connections open without answering until ``stop`` is set."""
    writers: set[asyncio.StreamWriter] = set()

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.add(writer)
        try:
            while await reader.read(65536):
                pass
        except ConnectionError:
            pass
        finally:
            writers.discard(writer)
            writer.close()

    server = await asyncio.start_server(swallow, sock=sock)
    try:
        await stop.wait()
    finally:
        server.close()
        for writer in list(writers):
            with contextlib.suppress(Exception):
                writer.close()
