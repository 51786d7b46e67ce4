"""A launched server process: its own session, a log file, and a teardown that leaves nothing.

Every process we start carries ``PYTEST_SGLANG_LAUNCH_ID``, inherited by its children.
Teardown signals the group (SIGTERM, grace, SIGKILL), then kills and names what still carries
our id; nothing else is signalled. A reaper runs the same teardown if pytest dies without it.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from pytest_sglang.server.handle import KILLED_AT_ONCE, StopReport
from pytest_sglang.server.logpump import SECRETS_ENV

__all__ = ["LAUNCH_ID_ENV", "ServerProcess", "StopReport", "find_ours", "kill_ours"]

#: Environment variable that marks every process of one launch.
LAUNCH_ID_ENV = "PYTEST_SGLANG_LAUNCH_ID"
#: Seconds between SIGTERM and SIGKILL: SGLang's own shutdown of a TP=8 server takes a few.
DEFAULT_GRACE = 15.0


def _has_launch_id(proc: psutil.Process, launch_id: str) -> bool:
    try:
        return proc.environ().get(LAUNCH_ID_ENV) == launch_id
    except (psutil.Error, OSError):
        return False  # gone, or not ours to read: then not ours to kill either


def find_ours(launch_id: str, exclude: Sequence[int] = ()) -> list[psutil.Process]:
    """Return the live (non-zombie) processes carrying ``launch_id`` in their environment."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid in exclude or proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except psutil.Error:
            continue
        if _has_launch_id(proc, launch_id):
            found.append(proc)
    return found


def _describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid} ({proc.name()}: {' '.join(proc.cmdline())[:120]})"
    except psutil.Error:
        return f"pid {proc.pid}"


def kill_ours(launch_id: str, pgid: int, grace: float, exclude: Sequence[int] = ()) -> StopReport:
    """Stop every process of a launch: the group politely, then stragglers by force.

    Used by :meth:`ServerProcess.stop` and by the reaper; ``exclude`` keeps the caller out.
    """
    report = StopReport()
    start = time.monotonic()
    members = find_ours(launch_id, exclude)
    # Signal the group only while a process of ours is in it: a pgid whose processes are all
    # gone could, in theory, be reused by somebody else's group.
    if any(_pgid(p) == pgid for p in members):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
            report.signals.append("SIGTERM to the process group")
        gone, alive = psutil.wait_procs([p for p in members if _pgid(p) == pgid], timeout=grace)
        if alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                report.signals.append(f"SIGKILL to the process group after {grace:g}s")
            killed, _ = psutil.wait_procs(alive, timeout=5)
            gone += killed
        report.reaped.update({p.pid: getattr(p, "returncode", None) for p in gone})
    # Whatever still carries our id escaped the group (setsid, double fork): name and kill it.
    stragglers = find_ours(launch_id, exclude)
    for proc in stragglers:
        report.stragglers.append(_describe(proc))
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(stragglers, timeout=5)
    report.seconds = time.monotonic() - start
    return report


def _pgid(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except OSError:
        return None


class ServerProcess:
    """Start a server command in its own session with a log file; stop it completely."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        secrets: Sequence[str] = (),
    ) -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = log_path
        #: Hidden in the log (``server/logpump.py``), with every secret-looking value.
        self.secrets = tuple(secrets)
        self.launch_id = uuid.uuid4().hex
        self._popen: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._pump: subprocess.Popen[bytes] | None = None
        #: Read end of the pipe on which the log pump signals the ready line; None once read.
        self._ready_fd: int | None = None
        self._ready_seen = False
        self.stop_report: StopReport | None = None
        self._killed_at_once = False

    @property
    def pid(self) -> int:
        """The server's pid (also its process group and session id)."""
        assert self._popen is not None, "not started"
        return self._popen.pid

    def start(self) -> None:
        """Start the server (own session, stdout+stderr to the log, redacted) and its reaper.

        The server writes into a pipe to the log pump (``server/logpump.py``), which keeps
        the log without the secrets the server prints (its arguments, the API key), and
        tells :meth:`wait_ready_line` when the server's ready line passes.
        """
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()  # the log exists (and is writable) before anything runs
        read_end, write_end = os.pipe()
        self._ready_fd, ready_write = os.pipe()
        try:
            self._pump = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pytest_sglang.server.logpump",
                    str(self.log_path),
                    str(ready_write),
                ],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={**os.environ, SECRETS_ENV: json.dumps(self.secrets)},
                start_new_session=True,
                pass_fds=(ready_write,),
            )
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdout=write_end,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**self.env, LAUNCH_ID_ENV: self.launch_id},
                    start_new_session=True,
                )
            except BaseException:
                os.close(write_end)
                write_end = -1
                self._end_pump()
                raise
        finally:
            os.close(read_end)
            os.close(ready_write)
            if write_end >= 0:
                os.close(write_end)
        # The reaper waits for EOF on its stdin: the pipe closes when this process ends in
        # any way, and then the reaper stops the server. Its own session keeps Ctrl-C away.
        self._reaper = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pytest_sglang.server.reaper",
                self.launch_id,
                str(self._popen.pid),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def poll(self) -> int | None:
        """Return the exit code if the server process has exited, else None."""
        return self._popen.poll() if self._popen is not None else None

    def exits_within(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the server process to exit; return whether it did."""
        if self._popen is None:
            return False
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def wait_ready_line(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the ready line in the log; return whether it came.

        Returns as soon as the log pump signals the line, or ends without it (the server's
        output closed: it is dying); once either has happened, every call waits ``timeout``.
        """
        if self._ready_fd is None:
            time.sleep(timeout)
        elif select.select([self._ready_fd], [], [], timeout)[0]:
            self._ready_seen = os.read(self._ready_fd, 1) != b""
            self._close_ready()
        return self._ready_seen

    def _close_ready(self) -> None:
        if self._ready_fd is not None:
            os.close(self._ready_fd)
            self._ready_fd = None

    def _end_pump(self, timeout: float = 10.0) -> None:
        """Wait for the log pump to copy the last lines (it ends at EOF); stop it if it hangs."""
        if self._pump is None or self._pump.poll() is not None:
            return
        try:
            self._pump.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # a process of ours still holds the pipe open
            self._pump.kill()
            self._pump.wait()

    def log_tail(self, lines: int = 30) -> list[str]:
        """Return the last ``lines`` lines of the server log.

        Once the server has exited, its last words are waited for (the log pump copies them
        within moments), so that a death's message shows what the server said last.
        """
        if self.poll() is not None and self._pump is not None and self._pump.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._pump.wait(timeout=2.0)
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(log.tell() - 64 * 1024, 0))
                text = log.read().decode(errors="replace")
        except OSError:
            return []
        return text.splitlines()[-lines:]

    def listens_on(self, port: int) -> bool:
        """Return whether a process of this launch listens on TCP ``port``."""
        for proc in find_ours(self.launch_id):
            try:
                connections = proc.net_connections(kind="tcp")
            except psutil.Error:
                continue
            if any(
                c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
                for c in connections
            ):
                return True
        return False

    def stop(self, grace: float = DEFAULT_GRACE) -> StopReport:
        """Stop the server and everything it started; idempotent."""
        if self.stop_report is not None:
            return self.stop_report
        if self._popen is None:  # never started (Popen itself failed): nothing to stop
            self._close_ready()
            self.stop_report = StopReport()
            return self.stop_report
        exclude = [self._reaper.pid] if self._reaper is not None else []
        report = kill_ours(self.launch_id, self._popen.pid, grace, exclude)
        self._end_pump()
        self._close_ready()
        if self._killed_at_once:
            report.signals.append(KILLED_AT_ONCE)
        try:
            code = self._popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        # psutil may have reaped the leader while waiting; then Popen only sees ECHILD and
        # reports 0, and the code psutil collected is the real one.
        report.exit_code = report.reaped.get(self._popen.pid, code)
        if self._reaper is not None:
            # Nothing left to reap: let the reaper find that out and exit.
            with contextlib.suppress(OSError):
                assert self._reaper.stdin is not None
                self._reaper.stdin.close()
            try:
                self._reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
                self._reaper.wait()
        report.stopped_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds")
        self.stop_report = report
        return report

    def kill_now(self) -> None:
        """Kill every process of this launch at once, with no grace period (a second Ctrl-C).

        Safe in a signal handler; a :meth:`stop` under way then finds them gone, and its
        report says they were killed. Only processes of ours are signalled: the group while
        its leader, our child, is not reaped (its id cannot have been reused), then every
        process carrying our launch id.
        """
        if self._popen is None or self.stop_report is not None:
            return
        self._killed_at_once = True
        if self._popen.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._popen.pid, signal.SIGKILL)
        exclude = [self._reaper.pid] if self._reaper is not None else []
        for proc in find_ours(self.launch_id, exclude):
            with contextlib.suppress(psutil.Error):
                proc.kill()
