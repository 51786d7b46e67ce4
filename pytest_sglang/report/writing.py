"""The one atomic writer: every file we keep is a new file in its folder, renamed into place.

A full disk or a killed process leaves the old file whole; anything but a regular file at the
path (a link, a FIFO, ``/dev/stdout``) is refused, never followed. Permissions are kept.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from pathlib import Path

from pytest_sglang.config.paths import describe_kind

__all__ = ["UnsafeTarget", "append_summary", "json_text", "write_atomic"]


class UnsafeTarget(OSError):
    """What stands at an output path is not a regular file: it is not replaced."""


def _check_regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        raise UnsafeTarget(
            errno.EINVAL,
            f"refused to write {path}: it is {describe_kind(mode)}, and writing would replace "
            "it (or, for a FIFO, block); give the path of a regular file",
        )


def _old_content(path: Path) -> bytes:
    """Read the file at ``path`` without following a link or blocking on a FIFO."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a link since we looked
            _check_regular(path, stat.S_IFLNK)
        raise
    with os.fdopen(fd, "rb") as file:
        _check_regular(path, os.fstat(file.fileno()).st_mode)
        return file.read()


def write_atomic(
    path: Path, data: str | bytes, *, append: bool = False, exclusive: bool = False
) -> None:
    """Write ``data`` to ``path`` through a new file renamed over it (see the module doc).

    ``append`` keeps the existing content before ``data``; ``exclusive`` never replaces
    (``FileExistsError``). Raises :class:`UnsafeTarget` for a path that is not a regular file.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    else:
        _check_regular(path, existing.st_mode)
        mode = stat.S_IMODE(existing.st_mode)
        payload = _old_content(path) + payload if append else payload
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(payload)
            file.flush()
            os.fsync(file.fileno())
            os.fchmod(file.fileno(), mode)
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    # Make the rename durable: a crash right after it must not bring the old file back.
    with contextlib.suppress(OSError):
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def json_text(document: object) -> str:
    """Return ``document`` as the text of a JSON file we keep: indented, strict (no NaN)."""
    return json.dumps(document, indent=1, allow_nan=False, default=str) + "\n"


def append_summary(path: Path, text: str) -> None:
    """Append a Markdown summary to ``path``, as ``$GITHUB_STEP_SUMMARY`` collects each step's.

    A blank line comes first after earlier content, so that its last block ends there.
    """
    follows = path.is_file() and path.stat().st_size > 0
    write_atomic(path, ("\n" if follows else "") + text, append=True)
