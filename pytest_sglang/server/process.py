"""A launched server process: its own session, a log file, and a teardown that leaves nothing.

Every process we start carries ``PYTEST_SGLANG_LAUNCH_ID``, inherited by its children.
Teardown signals the group (SIGTERM, grace, SIGKILL), then kills and names what still carries
our id; nothing else is signalled. A reaper (``python -m`` this module) runs the same teardown
when pytest dies without it.

The server's output reaches its log file through a log pump (``python -m`` this module
``pump``): each line is written redacted (a server prints its arguments, API key included),
and SGLang's :data:`READY_LINE` is signalled on its stdout. A process of its own, so a
busy test process never blocks the server on a full pipe; the secrets come in its environment,
not on its command line, which every user of the host can read.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from pytest_sglang.config.redaction import Redactor
from pytest_sglang.server.handle import KILLED_AT_ONCE, StopReport

__all__ = ["LAUNCH_ID_ENV", "MAX_LINE", "READY_LINE", "ServerProcess", "pump"]

#: Environment variable that marks every process of one launch.
LAUNCH_ID_ENV = "PYTEST_SGLANG_LAUNCH_ID"
#: Seconds between SIGTERM and SIGKILL: SGLang's own shutdown of a TP=8 server takes a few.
DEFAULT_GRACE = 15.0
#: The environment variable that carries the log pump's secrets (a JSON list of strings).
_SECRETS_ENV = "PYTEST_SGLANG_LOG_SECRETS"
#: A line without an end longer than this is written as it is (and redacted) in pieces.
MAX_LINE = 64 * 1024
#: What SGLang logs once warm-up has passed and its status is Up (the same in 0.4.10, 0.5.5
#: and 0.5.23); the emulator prints it too.
READY_LINE = "The server is fired up and ready to roll!"
_LINE_END = re.compile(rb"(?<=[\n\r])")


def find_ours(launch_id: str, exclude: Sequence[int] = ()) -> list[psutil.Process]:
    """Return the live (non-zombie) processes carrying ``launch_id`` in their environment."""
    skip = {os.getpid(), *exclude}
    # A process gone is left out; one not ours to read (None) is not ours to kill either.
    return [
        proc
        for proc in psutil.process_iter(["status", "environ"], ad_value=None)
        if proc.pid not in skip
        and proc.info["status"] != psutil.STATUS_ZOMBIE
        and (proc.info["environ"] or {}).get(LAUNCH_ID_ENV) == launch_id
    ]


def kill_ours(launch_id: str, pgid: int, grace: float, exclude: Sequence[int] = ()) -> StopReport:
    """Stop every process of a launch: the group politely, then stragglers by force.

    Used by :meth:`ServerProcess.stop` and by the reaper; ``exclude`` keeps the caller out.
    """
    report = StopReport()
    start = time.monotonic()
    reaped: dict[int, int | None] = {}
    # Signal the group only while a process of ours is in it: a pgid whose processes are all
    # gone could, in theory, be reused by somebody else's group.
    members = [p for p in find_ours(launch_id, exclude) if _pgid(p) == pgid]
    for sig, wait, said in (
        (signal.SIGTERM, grace, "SIGTERM to the process group"),
        (signal.SIGKILL, 5.0, f"SIGKILL to the process group after {grace:g}s"),
    ):
        if not members:
            break
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
            report.signals.append(said)
        gone, members = psutil.wait_procs(members, timeout=wait)
        reaped.update({p.pid: getattr(p, "returncode", None) for p in gone})
    # Whatever still carries our id escaped the group (setsid, double fork): name and kill it.
    stragglers = find_ours(launch_id, exclude)
    for proc in stragglers:
        described = f"pid {proc.pid}"
        with contextlib.suppress(psutil.Error):
            described += f" ({proc.name()}: {' '.join(proc.cmdline())[:120]})"
        report.stragglers.append(described)
    _kill(stragglers)
    psutil.wait_procs(stragglers, timeout=5)
    report.exit_code, report.seconds = reaped.get(pgid), time.monotonic() - start
    return report


def _pgid(proc: psutil.Process) -> int | None:
    with contextlib.suppress(OSError):
        return os.getpgid(proc.pid)
    return None


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.kill()


@dataclass(eq=False, repr=False)  # no repr: argv and env hold secrets (pytest -l prints locals)
class ServerProcess:
    """Start a server command in its own session with a redacted log file; stop it completely.

    ``secrets`` are hidden in the log, with every secret-looking value.
    """

    argv: Sequence[str]
    _: KW_ONLY
    env: Mapping[str, str]
    log_path: Path
    secrets: Sequence[str] = ()
    launch_id: str = field(init=False, default_factory=lambda: uuid.uuid4().hex)
    stop_report: StopReport | None = field(init=False, default=None)
    _popen: subprocess.Popen[bytes] | None = field(init=False, default=None)
    _reaper: subprocess.Popen[bytes] | None = field(init=False, default=None)
    _pump: subprocess.Popen[bytes] | None = field(init=False, default=None)
    _ready_seen: bool = field(init=False, default=False)
    _killed_at_once: bool = field(init=False, default=False)

    @property
    def pid(self) -> int:
        """The server's pid (also its process group and session id)."""
        assert self._popen is not None, "not started"
        return self._popen.pid

    def start(self) -> None:
        """Start the server (own session, output through the log pump) and its reaper.

        The log pump (:func:`pump`) keeps the log without the secrets the server prints and
        tells :meth:`wait_ready_line` when the ready line passes.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()  # the log exists (and is writable) before anything runs
        read_end, write_end = os.pipe()
        try:
            self._pump = _spawn(
                "pump",
                str(self.log_path),
                stdin=read_end,
                stdout=subprocess.PIPE,  # a byte when the ready line passes; EOF as it ends
                env={**os.environ, _SECRETS_ENV: json.dumps(list(self.secrets))},
            )
            self._popen = subprocess.Popen(
                self.argv,
                stdout=write_end,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**self.env, LAUNCH_ID_ENV: self.launch_id},
                start_new_session=True,
            )
        finally:
            for fd in (read_end, write_end):
                os.close(fd)
            if self._popen is None:  # the server never ran: the pump ends at EOF
                _end(self._pump)
        # The reaper waits for EOF on its stdin: the pipe closes when this process ends in
        # any way, and then the reaper stops the server. Its own session keeps Ctrl-C away.
        self._reaper = _spawn(self.launch_id, str(self.pid), stdin=subprocess.PIPE)

    def poll(self, wait: float = 0.0) -> int | None:
        """Return the exit code, waiting up to ``wait`` s for the server to exit; None if not."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self._popen.wait(wait) if self._popen is not None else None
        return None

    def wait_ready_line(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the ready line in the log; return whether it came.

        Once the line came, or the server's output closed without it, every call waits.
        """
        ready = self._pump.stdout if self._pump is not None else None
        if ready is None or ready.closed:
            time.sleep(timeout)
        elif select.select([ready], [], [], timeout)[0]:
            self._ready_seen = os.read(ready.fileno(), 1) != b""
            ready.close()
        return self._ready_seen

    def log_tail(self, lines: int) -> list[str]:
        """Return the last ``lines`` lines of the server log (after an exit, its last words)."""
        if self.poll() is not None and self._pump is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._pump.wait(timeout=2.0)
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(log.seek(0, os.SEEK_END) - 64 * 1024, 0))
                return log.read().decode(errors="replace").splitlines()[-lines:]
        except OSError:
            return []

    def listens_on(self, port: int) -> bool:
        """Return whether a process of this launch listens on TCP ``port``."""
        # Each process's own connections: the host-wide table needs root on macOS.
        for proc in find_ours(self.launch_id):
            with contextlib.suppress(psutil.Error):
                if any(
                    c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                    for c in proc.net_connections(kind="tcp")
                ):
                    return True
        return False

    def stop(self, grace: float = DEFAULT_GRACE) -> StopReport:
        """Stop the server and everything it started; idempotent."""
        if self.stop_report is not None:
            return self.stop_report
        report = StopReport()
        if self._popen is not None:  # else never started (Popen itself failed): nothing to stop
            report = kill_ours(self.launch_id, self._popen.pid, grace, self._exclude())
        _end(self._pump)  # the last lines copied
        if self._killed_at_once:
            report.signals.append(KILLED_AT_ONCE)
        code = self.poll(5.0)  # where psutil reaped the leader first, ECHILD: 0, not the code
        report.exit_code = code if report.exit_code is None else report.exit_code
        _end(self._reaper)  # nothing left to reap: the reaper finds that out, exits
        report.stopped_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        self.stop_report = report
        return report

    def kill_now(self) -> None:
        """Kill every process of this launch at once, no grace period (a second Ctrl-C).

        Safe in a signal handler. Only ours are signalled: the group while its leader, our
        child, is not reaped (its id cannot have been reused), then what carries our id.
        """
        if self._popen is None or self.stop_report is not None:
            return
        self._killed_at_once = True
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, signal.SIGKILL)
        _kill(find_ours(self.launch_id, self._exclude()))

    def _exclude(self) -> list[int]:
        return [self._reaper.pid] if self._reaper is not None else []


def _spawn(*args: str, stdout: int = subprocess.DEVNULL, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``python -m pytest_sglang.server.process ARGS`` in its own session.

    ``popen``: more of :class:`subprocess.Popen`'s arguments (``stdin``, ``env``...).
    """
    return subprocess.Popen(
        [sys.executable, "-m", "pytest_sglang.server.process", *args],
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        **popen,
    )


def _end(helper: subprocess.Popen[bytes] | None) -> None:
    """Close a helper's pipes, if any, and wait for it to end (each ends at EOF on stdin)."""
    if helper is None:
        return
    try:
        helper.communicate(timeout=10.0)
    except subprocess.TimeoutExpired:  # a process of ours still holds its pipe open
        helper.kill()
        helper.wait()


def _redact_bytes(data: bytes, redact: Callable[[str], str]) -> bytes:
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
    with open(sink, "wb", closefd=False) as out:
        while chunk := os.read(source, 65536):
            *lines, pending = _LINE_END.split(pending + chunk)
            if len(pending) > MAX_LINE:
                lines.append(pending)
                pending = b""
            out.write(b"".join(_redact_bytes(line, redact) for line in lines))
            out.flush()  # the log is read while the server runs
            if ready and any(ready in line for line in lines):
                on_ready()
                ready = b""
        out.write(_redact_bytes(pending, redact))


def main(argv: list[str]) -> int:
    """Reap: wait for EOF on stdin (pytest is gone), then stop every process of the launch.

    ``python -m pytest_sglang.server.process LAUNCH_ID PGID``; with ``pump LOG`` instead, the
    log pump (:func:`pump`): stdin appended to LOG, redacted, and a byte written to stdout on
    the ready line.
    """
    if argv[0] == "pump":

        def signal_ready() -> None:
            with contextlib.suppress(OSError):  # nobody waits any more: nothing to tell
                os.write(sys.stdout.fileno(), b"R")

        sink = os.open(argv[1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        redact = Redactor(json.loads(os.environ.get(_SECRETS_ENV, "[]")))
        pump(sys.stdin.fileno(), sink, redact, signal_ready)
        return 0
    # Only EOF ends the wait: a Ctrl-C meant for pytest must not take the reaper with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.read(sys.stdin.fileno(), 4096):
        pass
    kill_ours(argv[0], int(argv[1]), DEFAULT_GRACE, exclude=[os.getpid()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
