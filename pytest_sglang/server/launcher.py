"""Launch mode: start a profile's server, gate it, and stop it leaving nothing behind.

SGLang on GPU hosts and the emulator in CI differ only in the command's first words. Around
the process: GPU pre-flight, death detection and progress while the gate waits, a freshness
check (the process on the port is ours), and the post-flight check of GPU memory.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, replace
from pathlib import Path

from pytest_sglang.config.profiles import Profile
from pytest_sglang.config.redaction import split_flags
from pytest_sglang.config.settings import ServerTarget, Settings
from pytest_sglang.errors import (
    ServerDied,
    ServerExited,
    ServerLeftovers,
    ServerNotReady,
    SGLangError,
)
from pytest_sglang.gpu.hygiene import postflight, preflight, server_gpus
from pytest_sglang.gpu.model import GpuSnapshot
from pytest_sglang.gpu.probes import FakeProbe, GpuProbe
from pytest_sglang.server.handle import LaunchInfo, SGLangServer
from pytest_sglang.server.hints import exit_hint, hints_for, signal_name, without_probes
from pytest_sglang.server.process import ServerProcess
from pytest_sglang.server.readiness import ReadinessGate

__all__ = ["Launch", "build_command", "missing_launcher", "pick_port", "server_environment"]

#: Progress lines during a long launch: the first after this many seconds, then every
#: PROGRESS_EVERY.
PROGRESS_FIRST = 5.0
PROGRESS_EVERY = 15.0
#: A server that closes its port to die exits within this many seconds of closing it.
DYING_GRACE = 2.0
LOG_TAIL_LINES = 25
#: Lines read for the tail before the gate's probe lines are left out.
LOG_TAIL_WINDOW = 2000
#: Environment variables of the test run that must not reach a launched server: pytest's,
#: ours, xdist's, and coverage's (SGLang's scheduler under a tracer runs at a fraction of
#: its speed).
PRIVATE_ENV_PREFIXES = ("PYTEST_", "COV_CORE_")
PRIVATE_ENV_NAMES = ("COVERAGE_PROCESS_START", "COVERAGE_PROCESS_CONFIG")


def build_command(
    profile: Profile, launcher: str, host: str, port: int | str, python: str = sys.executable
) -> list[str]:
    """Return the command line that launches ``profile`` on ``host:port`` (or a placeholder).

    SGLang's (or the profile's ``command``), or the emulator's with the same arguments.
    """
    if launcher == "emulator":
        base = [python, "-m", "pytest_sglang.emulator"]
    elif profile.command:
        base = list(profile.command)
    else:
        base = [python, "-m", "sglang.launch_server"]
    model = ["--model-path", profile.model_path, "--tp-size", str(profile.tp)]
    return [*base, *model, "--host", host, "--port", str(port), *profile.args]


def missing_launcher(profile: Profile, launcher: str) -> str | None:
    """Return why ``profile`` cannot be launched here (SGLang not installed...), or None."""
    if profile.kind == "openai":
        return (
            'it is declared kind = "openai": the plugin launches SGLang only; start that '
            "server yourself and attach it under the profile's name"
        )
    if launcher == "emulator":
        return None
    if profile.command:
        program = profile.command[0]
        if os.sep in program and os.path.isfile(program) and not os.access(program, os.X_OK):
            return f"its command {program!r} is not executable (permission denied: chmod +x it)"
        if shutil.which(program) is None:
            return f"its command {program!r} is not on PATH"
        return None
    if importlib.util.find_spec("sglang") is None:
        return "SGLang is not installed in this Python (python -m sglang.launch_server)"
    return None


def server_environment(
    environ: Mapping[str, str], profile_env: Mapping[str, str]
) -> dict[str, str]:
    """Return a launched server's environment: ours, less the test run's, plus the profile's."""
    inherited = {
        name: value
        for name, value in environ.items()
        if not name.startswith(PRIVATE_ENV_PREFIXES) and name not in PRIVATE_ENV_NAMES
    }
    return {**inherited, **profile_env}


def pick_port(host: str) -> int:
    """Return a port on ``host`` that the OS just handed out as free."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(eq=False, repr=False)
class Launch:
    """One launch of one profile: :meth:`start` returns the ready server, :meth:`stop` ends it.

    ``gpu`` is the probe for the pre/post-flight checks, None where GPU state cannot be read.
    """

    target: ServerTarget
    settings: Settings
    _: KW_ONLY
    log_path: Path
    gpu: GpuProbe | None
    progress: Callable[[str], None] = lambda message: None
    #: The GPUs this launch may use (a pytest-xdist worker's share), or None: all.
    visible_gpus: Sequence[str] | None = None
    host: str = field(init=False, default="127.0.0.1")
    _process: ServerProcess | None = field(init=False, default=None)
    _fresh: bool = field(init=False, default=False)  # a process of ours listens on the port
    _started: float = field(init=False, default=0.0)
    _baseline: GpuSnapshot | None = field(init=False, default=None)
    _next_progress: float = field(init=False, default=0.0)  # when the next progress line is due

    def __post_init__(self) -> None:
        assert self.target.profile is not None, "a target without a URL is a profile's"
        self.profile: Profile = self.target.profile
        #: The session's redaction rule: every message, command and log line passes it.
        self.redact = self.settings.redact
        # The command with a placeholder port until one is picked: a launch refused before
        # it ran is recorded with the command it would have run.
        launcher = self.settings.launcher.value
        argv = self.redact.argv(build_command(self.profile, launcher, self.host, "PORT"))
        self.info = LaunchInfo(self.target.name, launcher, argv, self.log_path)

    @property
    def _proc(self) -> ServerProcess:
        """The server's process, once built."""
        assert self._process is not None, "not started"
        return self._process

    def start(self) -> SGLangServer:
        """Pre-flight, launch, gate; on any failure (Ctrl-C included) stop everything first.

        :raises GpuNotClean: the GPUs are held by other processes (nothing was started).
        :raises ServerNotReady: the gate failed; :class:`ServerExited` if the process died.
        """
        # The command and environment carry secrets: built in _new_process, never held in
        # this frame, whose locals pytest -l prints.
        self._started, self._next_progress = time.monotonic(), PROGRESS_FIRST
        try:
            # Another process may take the port before the server binds: the freshness check
            # (``_check_ours``) finds a server that is not ours.
            port = pick_port(self.host)
            self._process = self._new_process(port)
            try:
                self._process.start()
            except OSError as exc:
                raise ServerExited(
                    self.redact(
                        f"cannot start SGLang server {self.profile.name!r}: {exc}\n"
                        f"  command: {' '.join(self.info.command)}\n"
                        "  fix: check the profile's command (or that the launcher's Python "
                        "has the server installed)"
                    ),
                    phase="launch",
                    exit_code=None,
                ) from None
            self.info.pid = self._process.pid
            server = self._gate(port)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):  # Ctrl-C, SIGTERM: not a failure
                self.info.outcome = "stopped"
                self.info.cause = f"interrupted while starting ({type(exc).__name__})"
            else:  # the first line of the message, unless the exit recorded its cause
                self.info.outcome = "failed"
                first = self.redact(str(exc)).strip().partition("\n")[0].strip()
                self.info.cause = self.info.cause or first or type(exc).__name__
            cleanup = ""
            try:
                self.stop()  # nothing to stop when the process was never built
            except SGLangError as stop_error:
                cleanup = f"\n  during cleanup: {stop_error}"
            if self._process is None and isinstance(exc, SGLangError):
                raise exc.extended(f"\n  command: {' '.join(self.info.command)}") from None
            if isinstance(exc, ServerNotReady):  # an exit's message has the log's tail already
                text = str(exc) if isinstance(exc, ServerExited) else self._with_log(str(exc))
                raise exc.with_message(text + cleanup) from None
            raise
        self.info.outcome = "ready"
        self.info.seconds_to_ready = time.monotonic() - self._started
        self.info.readiness = dict(server.readiness.phases)
        self.progress(
            f"sglang: {self.profile.name!r} ready in {self.info.seconds_to_ready:.1f}s "
            f"({self.info.launcher}, pid {self.info.pid}, port {port}, log {self.info.log_path})"
        )
        return server

    def _new_process(self, port: int) -> ServerProcess:
        """Pre-flight the GPUs and build the server's process (not started yet)."""
        argv = build_command(self.profile, self.settings.launcher.value, self.host, port)
        if self.settings.launcher.value == "emulator":
            argv += self.settings.emulator_args.value
            if isinstance(self.gpu, FakeProbe):  # it simulates GPU holders in the probe's folder
                argv += ["--emulator-gpu-dir", str(self.gpu.directory)]
        # Recorded first: a pre-flight failure is reported with the command it stopped.
        self.info.command, self.info.port = self.redact.argv(argv), port
        env = {**server_environment(os.environ, self.profile.env), "PYTHONUNBUFFERED": "1"}
        if self.visible_gpus is not None:
            if "CUDA_VISIBLE_DEVICES" in self.profile.env:
                raise ServerNotReady(
                    f"profile {self.profile.name!r} sets CUDA_VISIBLE_DEVICES in its env, but "
                    "under pytest-xdist each worker launches on its own share of the GPUs: "
                    "drop it from the profile, or run without -n",
                    phase="launch",
                )
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.visible_gpus)
        if self.gpu is not None:
            self.info.gpus = server_gpus(self.gpu.snapshot(), self.profile.tp, env)
            self._baseline = preflight(self.gpu, self.info.gpus)
            # Pin the server to the checked GPUs by UUID: indices differ between NVML and
            # CUDA's default order, UUIDs do not.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.info.gpus)
        return ServerProcess(argv, env=env, log_path=self.log_path, secrets=self.settings.secrets)

    def _gate(self, port: int) -> SGLangServer:
        # The key the server was started with (``--api-key K`` or ``--api-key=K``), else ours.
        keys = (v[0] for flag, v in split_flags(self.profile.args) if flag == "--api-key" and v)
        gate = ReadinessGate.for_target(self.target, f"http://{self.host}:{port}", self.settings)
        server = replace(
            gate,
            api_key=next(keys, None) or gate.api_key,
            watch=self._watch,
            ready_line=self._proc.wait_ready_line,
        ).wait()
        # It answered: make sure it is ours, and report its exit if it died meanwhile.
        self._check_ours("freshness", time.monotonic() - self._started)
        return replace(server, launch=self.info)

    def _check_ours(self, phase: str, elapsed: float) -> None:
        """Raise if our process exited, or (once the port answers) if the port is not ours.

        Ours: a process we started listens on it (checked until found, then never again).
        """
        process, port = self._proc, self.info.port
        if phase != "connect" and not self._fresh and process.poll() is None:
            self._fresh = process.listens_on(port)
            # Not listening and still alive after the grace: another server took the port
            # (one that closed its port to die exits within it, and its exit is reported).
            if not self._fresh and process.poll(DYING_GRACE) is None:
                raise ServerNotReady(
                    f"SGLang server {self.profile.name!r} at http://{self.host}:{port} answered, "
                    f"but no process we started listens on port {port}: another server took "
                    "the port; stop it and rerun",
                    phase="freshness",
                )
        code = process.poll()
        if code is not None:
            cause = f"during phase {phase!r}, {elapsed:.1f}s after launch"
            raise ServerExited(self._exit_message(code, cause), phase=phase, exit_code=code)

    def _watch(self, phase: str, elapsed: float) -> None:
        """Between the gate's probes: fail at once (see ``_check_ours``), and show progress."""
        self._check_ours(phase, elapsed)
        if elapsed >= self._next_progress:
            self._next_progress = elapsed + PROGRESS_EVERY
            tail, _ = without_probes(self._proc.log_tail(50))
            last = next((line for line in reversed(tail) if line.strip()), "(log empty)")
            minutes, seconds = divmod(int(elapsed), 60)
            clock = f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"
            self.progress(
                self.redact(
                    f"sglang: launching {self.profile.name!r} ({self.info.launcher}): phase "
                    f"{phase}, {clock} elapsed; log: {last.strip()[:160]}"
                )
            )

    def _with_log(self, message: str, *, exit_code: int | None = None) -> str:
        """Return ``message`` with the command, the log's tail and hints; redacted."""
        window = self._proc.log_tail(LOG_TAIL_WINDOW)
        # The gate's own polls are no news: show what the server said besides them.
        tail, probes = without_probes(window)
        tail = tail[-LOG_TAIL_LINES:]
        lines = [message, f"  command: {' '.join(self.info.command)}", f"  log: {self.log_path}"]
        if tail:
            left_out = f"; {probes} readiness-probe lines left out" if probes else ""
            lines.append(f"  log tail (last {len(tail)} lines{left_out}):")
            lines += [f"    | {line}" for line in tail]
        # Signatures are searched in a longer tail than shown: a TP=8 failure prints one
        # traceback per rank after the line that explains it. Where the log has no known
        # signature, what the exit code says.
        hints: Sequence[str | None] = hints_for(window) or [exit_hint(exit_code)]
        lines += [f"  hint: {hint}" for hint in hints if hint]
        return self.redact("\n".join(lines))

    def check_alive(self, during: str = "", *, wait: float = 0.0) -> ServerDied | None:
        """Return the error describing this server's death if its process has exited.

        Cheap (a ``waitpid``; ``wait`` seconds allowed for a dying process to finish);
        ``during`` says who found out (a test id, ``teardown``).
        """
        code = self._proc.poll(wait) if self.info.outcome == "ready" else None
        if code is None:  # serving; or not up: never ready, stopped, or its death reported
            return None
        self.info.outcome = "died"
        assert self.info.seconds_to_ready is not None
        served = time.monotonic() - self._started - self.info.seconds_to_ready
        found = f" (found by {during})" if during else ""
        cause = f"while serving, {served:.1f}s after it was ready{found}"
        message = self._exit_message(code, cause, died=True)
        return ServerDied(message, phase="serving", exit_code=code)

    def _exit_message(self, code: int, cause: str, *, died: bool = False) -> str:
        """Record the exit and its ``cause``; return its message, with the log's tail."""
        name = signal_name(code)  # -9 (SIGKILL)
        self.info.exit_code = code
        self.info.cause = f"exited with code {code}{f' ({name})' if name else ''} {cause}"
        who = f"{self.profile.name!r} ({self.info.launcher}"
        how = f", pid {self.info.pid}) died:" if died else ")"
        return self._with_log(f"SGLang server {who}{how} {self.info.cause}", exit_code=code)

    def stop(self) -> None:
        """Stop the server and everything it started, then check GPU memory is released.

        :raises ServerLeftovers: processes of ours outlived the server (they were killed).
        :raises GpuMemoryNotReleased: memory not back to the baseline (pids named).
        """
        if self.finished:
            return
        self.check_alive("teardown")  # a death no test noticed is still a death
        self.info.stop = report = self._proc.stop()
        if self.info.outcome == "ready":
            self.info.outcome = "stopped"
        if self.info.exit_code is None:
            self.info.exit_code = report.exit_code
        if self.gpu is not None and self._baseline is not None:
            self.info.release_seconds = postflight(self.gpu, self.info.gpus, self._baseline)
        if report.stragglers:
            raise ServerLeftovers(
                self.redact(
                    f"teardown of SGLang server {self.profile.name!r} found processes of ours "
                    f"that outlived it ({'; '.join(report.signals)}), killed now: "
                    + "; ".join(report.stragglers)
                    + "\n  fix: the server (or its command) leaves children behind; they were "
                    "stopped, but check the server's shutdown"
                )
            )

    @property
    def finished(self) -> bool:
        """Whether nothing of this launch can be running: never started, or fully stopped."""
        return self._process is None or self.info.stop is not None

    def hurry(self) -> None:
        """Kill the server's processes at once, no grace period (a second Ctrl-C)."""
        if self._process is not None:
            self._process.kill_now()
