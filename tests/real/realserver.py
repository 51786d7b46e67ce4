"""The real-SGLang tier from the tests' side: find it, launch a server, watch it start, stop it.

The tier (``real_sglang/``, set up by ``bash real_sglang/setup.sh``) is a separate Python
3.11 virtualenv with the unmodified ``sglang==0.5.23`` wheel and a tiny random-weight Llama.
This module starts that server the way ``real_sglang/launch_profile.py`` says, in its own
process session, polls its startup sequence (:class:`StartupTrace`) until it is ready, and
stops it with SIGTERM to the group, checking by pid that nothing is left.

The emulator is started through the same code with the same SGLang flags
(:func:`emulator_command`), so the differential test compares like with like.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psutil

REPO = Path(__file__).resolve().parents[2]
SETUP_COMMAND = "bash real_sglang/setup.sh"

#: The environment as it was when the tests were imported: the suite's autouse fixture
#: removes every ``PYTEST_SGLANG_*`` variable from each test's environment (inner pytester
#: runs must not see a developer's settings), the tier's own two included.
ENVIRON: Mapping[str, str] = dict(os.environ)


def _load_launch_profile() -> ModuleType:
    path = REPO / "real_sglang" / "launch_profile.py"
    spec = importlib.util.spec_from_file_location("real_sglang_launch_profile", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: ``real_sglang/launch_profile.py``: the one place that says how the tier's server starts.
launch_profile = _load_launch_profile()


@dataclass(frozen=True)
class Tier:
    """Where the tier is: the venv's python and the tiny model (vocabulary 32000)."""

    python: Path
    model: Path

    @property
    def home(self) -> Path:
        """The tier's cache folder (``PYTEST_SGLANG_REAL_HOME`` or the default)."""
        return Path(launch_profile.real_home(ENVIRON))

    @property
    def small_vocab_model(self) -> Path:
        """The vocabulary-1024 model that ``setup.sh`` builds beside the main one."""
        return self.home / "model-vocab1024"


def find_tier() -> Tier | str:
    """Return the tier, or why it cannot run here (with the command that sets it up)."""
    why = launch_profile.missing(ENVIRON)
    if why:
        return f"real-SGLang tier not set up: {why}; set it up with `{SETUP_COMMAND}`"
    return Tier(Path(launch_profile.real_python(ENVIRON)), Path(launch_profile.real_model(ENVIRON)))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ------------------------------------------------------------------ the startup sequence

#: What the startup poller asks, in this order, every tick.
HEALTH_PATHS = ("/health", "/health_generate", "/ready")
INFO_PATHS = ("/v1/models", "/server_info", "/model_info")
STARTUP_PATHS = HEALTH_PATHS + INFO_PATHS


@dataclass(frozen=True)
class Tick:
    """One round of the startup poller: seconds since exec, and each path's outcome."""

    at: float
    outcomes: tuple[int | None, ...]  # status, or None for "connection refused"

    @property
    def phase(self) -> str:
        """``closed``, ``warming``, ``ready``, or ``transition`` (see :func:`phase_order`)."""
        health = self.outcomes[: len(HEALTH_PATHS)]
        info = self.outcomes[len(HEALTH_PATHS) :]
        if all(o is None for o in self.outcomes):
            return "closed"
        if all(o == 200 for o in info) and all(o == 503 for o in health):
            return "warming"
        if all(o == 200 for o in self.outcomes):
            return "ready"
        # The port opened, or the status flipped, between two requests of one round.
        return "transition"

    def describe(self) -> str:
        """Seconds and each path's outcome, for messages."""
        shown = " ".join(
            f"{p}={'refused' if o is None else o}"
            for p, o in zip(STARTUP_PATHS, self.outcomes, strict=True)
        )
        return f"{self.at:7.2f}s {shown}"


@dataclass
class StartupTrace:
    """The startup sequence as a client polling every ``interval`` seconds saw it."""

    ticks: list[Tick] = field(default_factory=list)

    def phase_order(self) -> list[str]:
        """The phases in the order seen, repeats collapsed, transitional rounds left out.

        A round is transitional when the server changed state between two of its requests
        (the port opened, or the status turned Up): the round mixes two phases.
        """
        order: list[str] = []
        for tick in self.ticks:
            phase = tick.phase
            if phase != "transition" and (not order or order[-1] != phase):
                order.append(phase)
        return order

    def unexpected(self) -> list[Tick]:
        """Rounds that fit no phase nor an edge between two phases (e.g. health 200, models
        503); transitional rounds between consecutive phases are expected."""
        return [t for t in self.ticks if t.phase == "transition" and not _is_edge(t)]

    def first(self, phase: str) -> float | None:
        """Seconds to the first round of ``phase``."""
        return next((t.at for t in self.ticks if t.phase == phase), None)

    def describe(self) -> str:
        """The rounds where something changed, for messages."""
        lines, last = [], None
        for tick in self.ticks:
            if tick.outcomes != last:
                lines.append(tick.describe())
                last = tick.outcomes
        return "\n".join(lines)


def _is_edge(tick: Tick) -> bool:
    # refused -> answered (some refused, the rest as warming) or 503 -> 200 (health mixed,
    # info 200): a state change inside one round.
    health = tick.outcomes[: len(HEALTH_PATHS)]
    info = tick.outcomes[len(HEALTH_PATHS) :]
    opening = all(o in (None, 503, 200) for o in tick.outcomes) and any(
        o is None for o in tick.outcomes
    )
    turning = all(o == 200 for o in info) and all(o in (200, 503) for o in health)
    return opening or turning


def _poll_round(client: httpx.Client, started: float) -> Tick:
    outcomes: list[int | None] = []
    at = time.monotonic() - started
    for path in STARTUP_PATHS:
        try:
            outcomes.append(client.get(path).status_code)
        except httpx.TransportError:
            outcomes.append(None)
    return Tick(at, tuple(outcomes))


# ------------------------------------------------------------------ processes


@dataclass
class ServerRun:
    """A started server (real or emulated): where, which processes, how it started."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    command: list[str]
    startup: StartupTrace = field(default_factory=StartupTrace)
    ready_after: float | None = None
    #: Every pid seen in the server's process group while it ran.
    pids: set[int] = field(default_factory=set)
    stopped: StopResult | None = None

    @property
    def pgid(self) -> int:
        """The process group (the leader's pid: it was started in a new session)."""
        return self.process.pid

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's log."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def remember_pids(self) -> set[int]:
        """Record the group's live pids (the leader and SGLang's scheduler, detokenizer)."""
        self.pids |= set(group_pids(self.pgid))
        with contextlib.suppress(psutil.Error):
            leader = psutil.Process(self.process.pid)
            self.pids |= {p.pid for p in leader.children(recursive=True)}
        return self.pids

    def alive(self) -> bool:
        """Whether the leader still runs."""
        return self.process.poll() is None

    def stop(self, grace: float = 60.0) -> StopResult:
        """SIGTERM to the group, SIGKILL after ``grace``; then check every pid seen is gone."""
        if self.stopped is not None:
            return self.stopped
        self.remember_pids()
        started = time.monotonic()
        signals = []
        if self.process.poll() is None or group_pids(self.pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
                signals.append("SIGTERM")
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (
                self.process.poll() is None or group_pids(self.pgid)
            ):
                time.sleep(0.1)
            if self.process.poll() is None or group_pids(self.pgid):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pgid, signal.SIGKILL)
                    signals.append("SIGKILL")
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        left = sorted(pid for pid in self.pids if pid_alive(pid))
        self.stopped = StopResult(
            seconds=time.monotonic() - started,
            signals=signals,
            exit_code=self.process.returncode,
            pids=sorted(self.pids),
            left=left,
        )
        return self.stopped


@dataclass(frozen=True)
class StopResult:
    """How a server stopped: the signals it took, its exit code, the pids left (none)."""

    seconds: float
    signals: list[str]
    exit_code: int | None
    pids: list[int]
    left: list[int]


def group_pids(pgid: int) -> list[int]:
    """Live (non-zombie) pids of process group ``pgid``."""
    pids = []
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(OSError, psutil.Error):
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                pids.append(proc.pid)
    return pids


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def real_command(tier: Tier, port: int, model: Path | None = None) -> list[str]:
    """The tier's launch command (``real_sglang/launch_profile.py``) on ``port``."""
    return list(
        launch_profile.launch_command(
            python=tier.python, model=model or tier.model, host="127.0.0.1", port=port
        )
    )


def real_env() -> dict[str, str]:
    """The tier server's environment: ours, less pytest's, plus the tier's variables."""
    base = {
        k: v
        for k, v in ENVIRON.items()
        if not k.startswith(("PYTEST_", "COV_CORE")) and k not in ("COVERAGE_PROCESS_START",)
    }
    return dict(launch_profile.launch_env(base))


#: Emulator options that make its startup resemble the real one's shape at test speed.
EMULATOR_TIMING = ("--emulator-load-time", "1", "--emulator-warmup-time", "1")


def emulator_command(real: Sequence[str], port: int, *extra: str) -> list[str]:
    """The emulator started with exactly the real command's SGLang flags, on ``port``."""
    index = list(real).index("sglang.launch_server")
    flags = list(real[index + 1 :])
    where = flags.index("--port")
    flags[where + 1] = str(port)
    return [sys.executable, "-m", "pytest_sglang.emulator", *flags, *EMULATOR_TIMING, *extra]


def start(
    name: str,
    command: Sequence[str],
    port: int,
    log_dir: Path,
    *,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 300.0,
    interval: float = 0.05,
) -> ServerRun:
    """Start ``command`` in its own session, poll its startup until ready; return the run.

    :raises RuntimeError: the process exited, or was not ready within ``ready_timeout``
        (it is stopped first; the log's tail is in the message).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=dict(env if env is not None else os.environ),
            cwd=log_dir,
        )
    run = ServerRun(name, f"http://127.0.0.1:{port}", process, log_path, list(command))
    started = time.monotonic()
    deadline = started + ready_timeout
    timeout = httpx.Timeout(30.0, connect=0.5)
    try:
        with httpx.Client(base_url=run.url, timeout=timeout, trust_env=False) as client:
            while True:
                run.remember_pids()
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {process.returncode} while starting; log tail:\n"
                        f"{run.log_tail()}"
                    )
                tick = _poll_round(client, started)
                run.startup.ticks.append(tick)
                if tick.phase == "ready":
                    run.ready_after = tick.at
                    return run
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{name} not ready after {ready_timeout:.0f}s; startup:\n"
                        f"{run.startup.describe()}\nlog tail:\n{run.log_tail()}"
                    )
                time.sleep(interval)
    except BaseException:
        run.stop()
        raise


# ------------------------------------------------------------------ one server at a time


@contextlib.contextmanager
def tier_lock(home: Path, timeout: float) -> Iterator[bool]:
    """Hold the tier's server lock (one real server per machine at a time); yields whether
    it was acquired within ``timeout`` seconds."""
    home.mkdir(parents=True, exist_ok=True)
    with (home / ".server.lock").open("w") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.5)
                continue
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
            return


def get_json(url: str, path: str) -> Any:
    """GET ``url + path`` and return its JSON."""
    with httpx.Client(base_url=url, timeout=30.0, trust_env=False) as client:
        response = client.get(path)
        response.raise_for_status()
        return response.json()
