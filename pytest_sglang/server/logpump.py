"""Copy a launched server's output into its log file, secrets hidden: ``python -m`` this.

Each line is written redacted (a server prints its arguments, API key included); SGLang's
:data:`READY_LINE` is signalled on a file descriptor. A process of its own, so a busy test
process never blocks the server on a full pipe; secrets come in :data:`SECRETS_ENV`, not on
the command line, which every user of the host can read.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Callable

from pytest_sglang.config.redaction import Redactor

__all__ = ["MAX_LINE", "READY_LINE", "SECRETS_ENV", "pump", "redact_bytes"]

#: The environment variable that carries the secrets to hide (a JSON list of strings).
SECRETS_ENV = "PYTEST_SGLANG_LOG_SECRETS"
#: A line without an end longer than this is written as it is (and redacted) in pieces.
MAX_LINE = 64 * 1024
#: What SGLang logs once warm-up has passed and its status is Up (the same in 0.4.10, 0.5.5
#: and 0.5.23); the emulator prints it too.
READY_LINE = "The server is fired up and ready to roll!"
_LINE_END = re.compile(rb"(?<=[\n\r])")


def redact_bytes(data: bytes, redact: Callable[[str], str]) -> bytes:
    """Return ``data`` redacted, each byte that is no secret unchanged (even invalid UTF-8)."""
    text = data.decode("utf-8", "surrogateescape")
    hidden = redact(text)
    return data if hidden == text else hidden.encode("utf-8", "surrogateescape")


def pump(
    source: int,
    sink: int,
    redact: Callable[[str], str],
    on_ready: Callable[[], None] = lambda: None,
) -> None:
    """Copy ``source`` to ``sink`` line by line, redacted, until EOF; ``on_ready`` once ready."""
    pending = b""
    ready = READY_LINE.encode()
    while chunk := os.read(source, 65536):
        *lines, pending = _LINE_END.split(pending + chunk)
        if len(pending) > MAX_LINE:
            lines.append(pending)
            pending = b""
        _write_all(sink, b"".join(redact_bytes(line, redact) for line in lines))
        if ready and any(ready in line for line in lines):
            on_ready()
            ready = b""
    _write_all(sink, redact_bytes(pending, redact))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def main(argv: list[str]) -> int:
    """``python -m pytest_sglang.server.logpump LOG READY_FD``: append stdin to LOG.

    The file and the descriptor close as the process exits.
    """
    secrets = json.loads(os.environ.get(SECRETS_ENV, "[]"))
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    sink = os.open(argv[0], flags, 0o644)

    def signal_ready() -> None:
        with contextlib.suppress(OSError):  # nobody waits any more: nothing to tell
            os.write(int(argv[1]), b"R")

    pump(sys.stdin.fileno(), sink, Redactor(secrets), signal_ready)
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a process by server/process.py
    sys.exit(main(sys.argv[1:]))
