"""Output paths (``--sglang-report``, ``--sglang-markdown``, ``report -o``), checked at startup.

Only nothing or a regular file may stand at the path: replacing a link, FIFO, device or
directory would replace what it stands for, or block. The write is in ``report/writing.py``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["OUTPUT_FIX", "describe_kind", "output_path", "output_problem"]

#: How to fix a refused output path (an example follows it in messages).
OUTPUT_FIX = "give the path of a regular file, new or existing, in a writable directory"


def output_path(base: Path, value: str) -> Path:
    """Return ``value`` as an absolute path, directories resolved, a link at its last part kept."""
    path = Path(base, value)
    if not path.name or path.name in (".", ".."):
        return path.resolve()
    return path.parent.resolve() / path.name


def describe_kind(mode: int) -> str:
    """Return what a ``stat`` mode is, in words: "a FIFO", "a directory", ..."""
    kinds = (
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def output_problem(path: Path) -> str | None:
    """Return why ``path`` cannot take an output file, or None when it can."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return f"cannot be examined ({exc.strerror or exc})"
    if st is not None and not stat.S_ISREG(st.st_mode):
        kind = describe_kind(st.st_mode)
        if stat.S_ISLNK(st.st_mode):
            try:
                kind += f" (to {os.readlink(path)})"
            except OSError:
                pass
        return (
            f"is {kind}: an output is written to a new file renamed over its path, which "
            "would replace what stands there (and writing into a FIFO would block the run)"
        )
    # Its directory, or the closest one above it that exists (to be created in).
    directory = next((d for d in (path.parent, *path.parent.parents) if d.exists()), path.parent)
    if not directory.is_dir():
        return f"cannot be created: {directory} is not a directory"
    if not _writable(directory):
        target = "its directory" if directory == path.parent else "the directory to create it in"
        return f"cannot be written: {target} {directory} is not writable"
    return None


def _writable(directory: Path) -> bool:
    if not os.access(directory, os.W_OK | os.X_OK):
        return False
    # Root passes access() on any directory of a writable file system; a directory nobody
    # may write to (mode 0555, /proc's entries) is still no place for a report.
    if os.geteuid() == 0:
        try:
            return bool(os.stat(directory).st_mode & 0o222)
        except OSError:
            return False
    return True
