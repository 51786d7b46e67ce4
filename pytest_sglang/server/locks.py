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

__all__ = ["ServerLocks", "host_port", "server_key"]


def host_port(url: str) -> tuple[str, int]:
    """Return the host (lower case) and port a URL reaches, the scheme's default if none."""
    parts = urlsplit(url)
    return (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


def server_key(url: str) -> str:
    """Return the lock name of the server at ``url``: one name however the URL is spelt."""
    (host, port), parts = host_port(url), urlsplit(url)
    where = f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"
    return hashlib.sha256(where.encode()).hexdigest()[:20]


class ServerLocks:
    """Exclusive holds on servers, shared by every process that uses the same ``folder``.

    ``folder`` None: this process alone. ``owner`` is written in the lock for waiting processes.
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
        #: The keys this process holds (reentrant: an inner hold of one does nothing).
        self._held: set[str] = set()

    @contextlib.contextmanager
    def hold(self, *urls: str, during: str = "") -> Iterator[None]:
        """Hold the servers at ``urls`` for the ``with`` block; wait while another holds one.

        ``during`` (a test id) is written in the lock, so that a waiting worker can say whom.
        """
        with contextlib.ExitStack() as stack:
            for key, url in sorted({server_key(url): url for url in urls}.items()):
                if self.folder is not None and key not in self._held:  # the outer hold has it
                    stack.enter_context(self._hold_one(self.folder, key, url, during))
            yield

    @contextlib.contextmanager
    def _hold_one(self, folder: Path, key: str, url: str, during: str) -> Iterator[None]:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        self._held.add(key)
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
            yield
        finally:
            self._held.discard(key)
            os.close(fd)  # closing the file releases the lock taken on it
