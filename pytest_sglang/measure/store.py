"""Stored baselines: sessions saved under a storage URI of pytest-benchmark's own form.

The backends (files, Elasticsearch); the format is ``measure/session_format.py``. File saves
are atomic and take the first free number under a lock, so concurrent CI jobs both land
(``docs/baselines.md``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_sglang.config.options import DEFAULT_STORAGE
from pytest_sglang.measure.session_format import (
    DamagedSession,
    StoredMeasurement,
    measurements_of,
    read_document,
)
from pytest_sglang.report.writing import json_text, write_atomic

__all__ = ["MACHINE_ID", "BaselineStore", "StoredSession", "check_save_name"]

#: The machine folder of the file storage (the GPUs are in each fingerprint instead).
MACHINE_ID = "sglang"

_SAVE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_NUMBERED = re.compile(r"^(\d{4})_(.+)\.json$")
#: The storage URIs there are (pytest-benchmark's): files, or Elasticsearch over HTTP(S).
_STORAGE = re.compile(r"^(file|elasticsearch\+https?)://")
#: Why an Elasticsearch storage cannot be used here.
_NO_CLIENT = "the Elasticsearch storage needs its client: pip install elasticsearch"


@dataclass(frozen=True)
class StoredSession:
    """One saved session: its id, labels and measurements."""

    id: str
    name: str
    datetime: str
    labels: Mapping[str, Any]
    measurements: tuple[StoredMeasurement, ...]
    document: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)
    #: What is wrong with a damaged session (``sessions(damaged=True)`` only); else None.
    problem: str | None = None
    #: The file storage's sequence number, if any.
    number: int | None = None


def check_save_name(name: str) -> None:
    """Refuse a save name that would not make a plain file name (``NNNN_NAME.json``).

    :raises ValueError: naming it and what is accepted.
    """
    if not _SAVE_NAME.match(name):
        raise ValueError(f"cannot save under {name!r}: use letters, digits, '_', '.', '+' and '-'")


@contextlib.contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder/.lock`` (a no-op where flock does not exist)."""
    with open(folder / ".lock", "a") as handle:
        if sys.platform != "win32":  # Windows: numbers may race, files never replace each other
            import fcntl

            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)  # released when the file closes
        yield


class BaselineStore:
    """Saved sessions under one pytest-benchmark storage URI.

    ``file://PATH`` (relative to ``base``, default the working directory) is read and written
    here, atomically; ``elasticsearch+http[s]://HOST/INDEX/DOCTYPE?project_name=P`` goes
    through pytest-benchmark's own Elasticsearch storage (``pip install elasticsearch``).
    """

    def __init__(self, uri: str = DEFAULT_STORAGE, *, base: Path | None = None) -> None:
        self.uri = uri if "://" in uri else f"file://{uri}"
        self.base = base or Path.cwd()
        if not _STORAGE.match(self.uri):
            from pytest_sglang.config.redaction import redact

            raise ValueError(
                f"storage {redact(uri)!r} is not file://PATH or "
                "elasticsearch+http[s]://host1,host2/index/doctype?project_name=NAME"
            )
        self.path: Path | None = None
        if self.uri.startswith("file://"):
            path = Path(self.uri[len("file://") :]).expanduser()
            self.path = path if path.is_absolute() else self.base / path

    def __str__(self) -> str:
        """Return the folder, or the URI with any password as ``***`` (it goes into messages)."""
        from pytest_sglang.config.redaction import redact

        return str(self.path) if self.path is not None else redact(self.uri)

    @property
    def folder(self) -> Path:
        """The machine folder that holds the files (file storage only)."""
        assert self.path is not None
        return self.path / MACHINE_ID

    @functools.cached_property
    def _elasticsearch(self) -> Any:
        from pytest_benchmark.logger import Logger
        from pytest_benchmark.utils import load_storage

        try:
            return load_storage(  # type: ignore[no-untyped-call]
                self.uri,
                logger=Logger(Logger.QUIET),  # type: ignore[no-untyped-call]
                default_machine_id=MACHINE_ID,
                netrc="",  # pytest-benchmark's "no netrc file" (None is a TypeError there)
            )
        except ImportError:
            raise OSError(_NO_CLIENT) from None

    # -- writing ----------------------------------------------------------------------------

    def check_writable(self, *, timeout: float = 10.0) -> None:
        """Check now, before a session measures for hours, that a save would land.

        Files: a probe is written, synced and removed; Elasticsearch: :meth:`check_reachable`.

        :raises OSError: with what failed, naming the folder or the host (never a password).
        """
        if self.path is None:
            self.check_reachable(timeout=timeout)
            return
        folder = self.folder
        above = next(p for p in (folder, *folder.parents) if p.exists())
        if not above.is_dir():
            raise OSError(f"cannot write to {folder}: {above} is a file, not a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-", suffix=".partial") as f:
                f.write(b"\0" * 65536)  # about what a session of a few sweeps takes
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise OSError(f"cannot write to {folder}: {exc.strerror or exc}") from None

    def check_reachable(self, *, timeout: float = 10.0) -> None:
        """Check that an Elasticsearch host accepts a TCP connection and its client is installed.

        :raises OSError: naming the hosts tried (never a password).
        """
        if self.path is not None:
            return
        import importlib.util
        import socket
        from urllib.parse import urlsplit

        from pytest_benchmark.utils import parse_elasticsearch_storage

        hosts, *_ = parse_elasticsearch_storage(  # type: ignore[no-untyped-call]
            self.uri[len("elasticsearch+") :], netrc_file=""
        )
        tried = []
        for host in hosts:
            url = urlsplit(host if "://" in host else f"http://{host}")
            try:
                where = (url.hostname, url.port or 9200)
                socket.create_connection(where, timeout).close()
                break
            except ValueError:
                tried.append(f"{url.hostname} (not a port number)")
            except OSError as exc:
                tried.append(f"{url.hostname}:{url.port or 9200} ({exc.strerror or exc})")
        else:
            raise OSError(
                f"Elasticsearch at {', '.join(tried)} does not answer within {timeout:g} s"
            )
        if importlib.util.find_spec("elasticsearch") is None:
            raise OSError(_NO_CLIENT)

    def save(self, name: str, document: Mapping[str, Any]) -> str:
        """Save a document of :func:`build_document` under ``name``; return where it landed."""
        check_save_name(name)
        if self.path is None:  # pytest-benchmark's save takes the document apart: a copy
            self._elasticsearch.save(copy.deepcopy(dict(document)), name)
            return f"{self} ({MACHINE_ID}_{name})"  # str(): the URI's password as ***
        return str(self._save_file(name, document))

    def _save_file(self, name: str, document: Mapping[str, Any]) -> Path:
        folder = self.folder
        folder.mkdir(parents=True, exist_ok=True)
        payload = json_text(document).encode()
        # Under the lock no two writers take one number; an exclusive write replaces nothing.
        with _folder_lock(folder):
            for _ in range(10_000):
                taken = [int(m[1]) for p in folder.iterdir() if (m := _NUMBERED.match(p.name))]
                target = folder / f"{max(taken, default=0) + 1:04d}_{name}.json"
                try:
                    write_atomic(target, payload, exclusive=True)
                except FileExistsError:
                    continue
                return target
        raise OSError(f"could not find a free file name in {folder}")

    # -- reading ----------------------------------------------------------------------------

    def sessions(self, *, damaged: bool = False) -> list[StoredSession]:
        """Return every stored session that has pytest-sglang measurements, oldest first.

        ``damaged``: the damaged ones too (``problem`` says why), in their place.

        :raises DamagedSession: a damaged session file (never skipped: it may be the latest).
        """
        if self.path is None:
            every = [
                self._session(str(key), data, None) for key, data in self._elasticsearch.load()
            ]
        else:
            paths = self.folder.glob("[0-9][0-9][0-9][0-9]_*.json") if self.folder.is_dir() else []
            every = [self._read(path, damaged) for path in sorted(paths)]
        # A session of plain pytest-benchmark results (no measurement of ours) is not one.
        return [s for s in every if s.measurements or s.problem]

    def _read(self, path: Path, damaged: bool) -> StoredSession:
        sid = f"{MACHINE_ID}/{path.stem}"
        try:
            return self._session(
                sid, read_document(path, folder=self.folder), path, folder=self.folder
            )
        except DamagedSession as exc:
            if not damaged:
                raise
            return StoredSession(sid, path.stem, "", {}, (), problem=exc.problem)

    @staticmethod
    def _session(
        sid: str, document: Mapping[str, Any], path: Path | None, *, folder: Path | None = None
    ) -> StoredSession:
        try:
            measurements = measurements_of(document, sid)
        except (ValueError, AttributeError, TypeError) as exc:
            raise DamagedSession(path or sid, str(exc), folder=folder) from None
        labels = dict(measurements[0].labels) if measurements else {}
        match = _NUMBERED.match(path.name) if path is not None else None
        return StoredSession(
            id=sid,
            name=match.group(2) if match else str(labels.get("name", sid)),
            datetime=str(document.get("datetime", "")),
            labels=labels,
            measurements=tuple(measurements),
            document=document,
            number=int(match.group(1)) if match else None,
        )

    def find(self, ref: str) -> StoredSession:
        """Return the session ``ref`` names: ``latest``, a number, a save name, an id or a path.

        A path may name a saved session's file or a JSON report (``--sglang-report``).

        :raises LookupError: with the sessions there are.
        :raises DamagedSession: the file, or a session file in the store, is damaged.
        """
        path = Path(ref)
        if ref.endswith(".json") and (path.is_file() or (self.base / path).is_file()):
            full = path if path.is_file() else self.base / path
            return self._session(str(full), read_document(full), full)
        sessions = self.sessions()
        if not sessions:
            raise LookupError(f"no stored sessions in {self}")
        if ref == "latest":
            return sessions[-1]
        for session in reversed(sessions):
            if ref in (session.id, Path(session.id).name, session.name) or (
                ref.isdigit() and session.number == int(ref)
            ):
                return session
        known = ", ".join(s.id for s in sessions[-10:])
        raise LookupError(f"no stored session {ref!r} in {self}; the latest are: {known}")

    def measurements(self, ref: str = "latest") -> list[StoredMeasurement]:
        """Return the measurements ``ref`` names (:meth:`find`), oldest first; ``latest``: all."""
        if ref == "latest":
            return [m for session in self.sessions() for m in session.measurements]
        return list(self.find(ref).measurements)
