"""The one atomic writer: every file we keep is a new file in its folder, renamed into place.

Every file we keep (reports, summaries, stored baselines) is written through
:func:`write_atomic`: a full disk or a killed process leaves the old file as it was.
``os.replace`` swaps the directory entry, so a symbolic link at the path is replaced, not
followed; anything but a regular file there (a link, a FIFO, ``/dev/stdout``, a directory)
is refused. Appending reads the old content and writes it, with the new text, to the new
file; permissions are kept (a new file: ``0666`` less the umask).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from pytest_sglang.config.paths import describe_kind

__all__ = ["UnsafeTarget", "write_atomic"]


class UnsafeTarget(OSError):
    """What stands at an output path is not a regular file: it is not replaced."""


def _refuse(path: Path, mode: int) -> UnsafeTarget:
    kind = describe_kind(mode)
    return UnsafeTarget(
        errno.EINVAL,
        f"refused to write {path}: it is {kind}, and writing would replace it (or, for a "
        "FIFO, block); give the path of a regular file",
    )


def _existing(path: Path) -> os.stat_result | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, st.st_mode)
    return st


def _read_regular(path: Path) -> bytes:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # became a link since we looked
            raise _refuse(path, stat.S_IFLNK) from None
        raise
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, st.st_mode)
        return file.read()


def write_atomic(
    path: Path, data: str | bytes, *, append: bool = False, exclusive: bool = False
) -> None:
    """Write ``data`` to ``path`` through a new file renamed over it (see the module doc).

    ``append`` keeps the existing content before ``data``. ``exclusive`` never replaces: the
    new file is hard-linked to ``path``, which must not exist yet.

    :raises UnsafeTarget: something other than a regular file stands at ``path``.
    :raises FileExistsError: ``exclusive`` and ``path`` exists.
    :raises OSError: the write failed (no space, no permission...); the target is untouched.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    path.parent.mkdir(parents=True, exist_ok=True)
    existing = _existing(path)
    if append and existing is not None:
        payload = _read_regular(path) + payload
    if existing is not None:
        mode = stat.S_IMODE(existing.st_mode)
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
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
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (a crash right after it must not bring the old file back)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
