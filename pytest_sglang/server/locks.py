"""One measurement of a server at a time, across the session's pytest-xdist workers too.

An exclusive ``fcntl.flock`` per server URL, in a folder the workers share, held for a whole
measurement (both servers of a comparison); the kernel releases it when a worker dies.
Reentrant within a process and taken in one order, so comparisons cannot deadlock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["ServerLocks", "server_key"]


def server_key(url: str) -> str:
    """Return the lock name of the server at ``url``: one name however the URL is spelt."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    where = f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"
    return hashlib.sha256(where.encode()).hexdigest()[:20]


class ServerLocks:
    """Exclusive holds on servers, shared by every process that uses the same ``folder``.

    :param folder: where the lock files live (None: this process alone, nothing to share).
    :param owner: who holds a lock (the worker and its pid), written for waiting processes.
    :param progress: receives the line saying what a measurement waits for, and whom.
    """

    def __init__(
        self,
        folder: Path | None,
        *,
        owner: str = "",
        progress: Callable[[str], None] = lambda message: None,
    ) -> None:
        self.folder = folder
        self._owner = owner or f"pid {os.getpid()}"
        self._progress = progress
        #: key -> (open lock file, how many holds this process has on it)
        self._held: dict[str, tuple[int, int]] = {}

    @contextlib.contextmanager
    def hold(self, *urls: str, during: str = "") -> Iterator[None]:
        """Hold the servers at ``urls`` for the ``with`` block; wait while another holds one.

        ``during`` (a test id) is written in the lock file, so that a waiting worker can say
        whom it waits for.
        """
        keys = sorted({server_key(url): url for url in urls}.items())
        taken: list[str] = []
        try:
            for key, url in keys:
                self._acquire(key, url, during)
                taken.append(key)
            yield
        finally:
            for key in reversed(taken):
                self._release(key)

    def _acquire(self, key: str, url: str, during: str) -> None:
        if key in self._held:
            fd, count = self._held[key]
            self._held[key] = (fd, count + 1)
            return
        if self.folder is None:
            self._held[key] = (-1, 1)
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 1000, 0).decode(errors="replace").strip() or "another"
                self._progress(
                    f"sglang: waiting for the server at {url}: {holder} is measuring it (one "
                    "measurement of a server at a time, across pytest-xdist workers)"
                )
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{self._owner}{f' in {during}' if during else ''}".encode(), 0)
        except BaseException:
            os.close(fd)  # closing the file releases a lock taken on it
            raise
        self._held[key] = (fd, 1)

    def _release(self, key: str) -> None:
        fd, count = self._held[key]
        if count > 1:
            self._held[key] = (fd, count - 1)
            return
        del self._held[key]
        if fd >= 0:
            os.close(fd)
