"""The log pump keeps a server's log byte for byte, less the secrets (``server/logpump.py``)."""

from __future__ import annotations

import os
import threading

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.server.logpump import MAX_LINE, pump


def _pumped(data: bytes, secrets: tuple[str, ...] = ()) -> bytes:
    read_end, write_end = os.pipe()
    sink_read, sink_write = os.pipe()
    out: list[bytes] = []

    def drain() -> None:
        while chunk := os.read(sink_read, 65536):
            out.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()

    def feed() -> None:
        # Written in small pieces: lines cross the pump's reads.
        for start in range(0, len(data), 7):
            os.write(write_end, data[start : start + 7])
        os.close(write_end)

    writer = threading.Thread(target=feed)
    writer.start()
    pump(read_end, sink_write, Redactor(secrets))
    writer.join()
    os.close(read_end)
    os.close(sink_write)
    reader.join()
    os.close(sink_read)
    return b"".join(out)


def test_every_byte_but_the_secrets_is_kept() -> None:
    data = (
        b"[2026] server_args=ServerArgs(model_path='m', api_key='sk-abc123', port=30000)\n"
        b"progress 10%\rprogress 20%\r\xff\xfe not UTF-8 \xc3\n"
        b"token sk-abc123 again, no end"
    )
    assert _pumped(data, ("sk-abc123",)) == (
        b"[2026] server_args=ServerArgs(model_path='m', api_key='***', port=30000)\n"
        b"progress 10%\rprogress 20%\r\xff\xfe not UTF-8 \xc3\n"
        b"token *** again, no end"
    )


def test_a_line_without_an_end_is_written_in_pieces() -> None:
    data = b"x" * (3 * MAX_LINE) + b"\n"
    assert _pumped(data) == data
