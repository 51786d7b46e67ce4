"""SGLang-style log lines on stdout, flushed per line (launchers redirect stdout to a file).

Formats, as SGLang sets them up: its own lines are ``[%Y-%m-%d %H:%M:%S] message`` (scheduler
lines ``[... TP0] message``), uvicorn's ``[...] INFO:     message`` and access lines
``[...] INFO:     127.0.0.1:5555 - "GET /health HTTP/1.1" 200``.
"""

from __future__ import annotations

import io
import logging
import sys

from uvicorn.logging import AccessFormatter, DefaultFormatter

DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
SERVER_LOGGER = "pytest_sglang.emulator"
SCHEDULER_LOGGER = "pytest_sglang.emulator.scheduler"
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "warn": 30, "error": 40, "critical": 50}


def level_number(name: str | None, default: int = logging.INFO) -> int:
    """Return the logging level for SGLang's ``--log-level`` value."""
    return _LEVELS.get((name or "").lower(), default)


def configure(log_level: str | None, http_log_level: str | None) -> None:
    """Send the emulator's and uvicorn's records to stdout in SGLang's formats."""
    stream = sys.stdout
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(line_buffering=True)
    level = level_number(log_level)
    server = logging.StreamHandler(stream)
    server.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", DATE_FORMAT))
    _attach(SERVER_LOGGER, server, level)
    scheduler = logging.StreamHandler(stream)
    scheduler.setFormatter(logging.Formatter("[%(asctime)s TP0] %(message)s", DATE_FORMAT))
    _attach(SCHEDULER_LOGGER, scheduler, level)
    error = logging.StreamHandler(stream)
    error.setFormatter(
        DefaultFormatter("[%(asctime)s] %(levelprefix)s %(message)s", DATE_FORMAT, use_colors=False)
    )
    _attach("uvicorn.error", error, level)
    access = logging.StreamHandler(stream)
    access.setFormatter(
        AccessFormatter(
            '[%(asctime)s] %(levelprefix)s %(client_addr)s - "%(request_line)s" %(status_code)s',
            DATE_FORMAT,
            use_colors=False,
        )
    )
    _attach("uvicorn.access", access, level_number(http_log_level, level))


def _attach(name: str, handler: logging.Handler, level: int) -> None:
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.setLevel(level)
    logger.propagate = False


def server_logger() -> logging.Logger:
    """Return the logger for the server's own lines."""
    return logging.getLogger(SERVER_LOGGER)


def scheduler_logger() -> logging.Logger:
    """Return the logger for scheduler lines, prefixed ``TP0`` (one scheduler for all ranks)."""
    return logging.getLogger(SCHEDULER_LOGGER)


def flush() -> None:
    """Flush every handler: the process may be about to kill itself."""
    for name in (SERVER_LOGGER, SCHEDULER_LOGGER, "uvicorn.error", "uvicorn.access"):
        for handler in logging.getLogger(name).handlers:
            handler.flush()
    sys.stdout.flush()
