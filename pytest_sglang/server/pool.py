"""The session's servers: attached ones gated once, launched ones started once, one at a time.

Launched servers share the GPUs, so at most one runs; once up, it takes every measurement
declared for it. A server whose gate or launch failed, or that died, fails every later test
that needs it at once, with the original cause (``docs/architecture.md``).

One measurement of a server at a time, across the session's pytest-xdist workers too: an
exclusive ``fcntl.flock`` per server URL (:class:`ServerLocks`), in a folder the workers share,
held for a whole measurement (both servers of a comparison); the kernel releases it when a
worker dies. Reentrant within a process and taken in one order, so comparisons cannot deadlock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import KW_ONLY, InitVar, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from pytest_sglang.config.settings import ServerTarget, Settings
from pytest_sglang.errors import (
    GpuUnavailable,
    ServerDied,
    ServerNotReady,
    ServerUnavailable,
    SGLangError,
)
from pytest_sglang.gpu.hygiene import visible_gpus, worker_gpus
from pytest_sglang.gpu.probes import GpuProbe, make_probe
from pytest_sglang.server.handle import LaunchInfo, SGLangServer
from pytest_sglang.server.launcher import Launch, missing_launcher
from pytest_sglang.server.readiness import ReadinessGate

__all__ = ["ServerLocks", "ServerPool", "host_port", "server_key"]


@dataclass(eq=False, repr=False)
class ServerPool:
    """Hands out ready servers by name; owns launched servers and the GPU probe."""

    settings: Settings
    _: KW_ONLY
    log_dir: Path = field(default_factory=lambda: Path.cwd() / ".sglang-logs")
    progress: Callable[[str], None] = lambda message: None
    #: (index, count) when this session is a pytest-xdist worker, else None.
    xdist_worker: tuple[int, int] | None = None
    #: Gates and launches are bounded by --sglang-ready-timeout, not the test's timeout.
    outside_test_timeout: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext
    lock_dir: InitVar[Path | None] = None
    #: Every launch of the session, in order, for the report.
    launches: list[LaunchInfo] = field(init=False, default_factory=list)
    #: Teardown problems that did not fail a test (stragglers found and killed).
    problems: list[str] = field(init=False, default_factory=list)
    #: Why GPU state cannot be read here, if it cannot.
    gpu_skip_reason: str | None = field(init=False, default=None)
    #: Called with each server the pool launched, once it is ready (the session's
    #: bench takes the measurements declared for it: ``Bench.take_declared``).
    on_launched: Callable[[SGLangServer], None] | None = field(init=False, default=None)
    _ready: dict[str, SGLangServer] = field(init=False, default_factory=dict)
    _failed: dict[str, SGLangError] = field(init=False, default_factory=dict)
    _running: Launch | None = field(init=False, default=None)
    _gpu: GpuProbe | None = field(init=False, default=None)
    _gpu_checked: bool = field(init=False, default=False)  # made once: none after close()
    _gpu_names: list[str] | None = field(init=False, default=None)

    def __post_init__(self, lock_dir: Path | None) -> None:
        worker = f"pytest-xdist worker gw{self.xdist_worker[0]}, " if self.xdist_worker else ""
        self.locks = ServerLocks(lock_dir, owner=f"{worker}pid {os.getpid()}", progress=self.say)

    def default_name(self) -> str:
        """Return the server a test without ``sglang_profile`` gets; raise if that is ambiguous."""
        name = self.settings.default_server()
        if name is not None:
            return name
        raise ServerUnavailable(
            f"several SGLang servers are configured ({', '.join(self.settings.targets)}) and this "
            "test does not say which one it needs; mark it with @pytest.mark.sglang_profile(NAME)"
        )

    def measuring(
        self, *servers: str | SGLangServer, during: str = ""
    ) -> AbstractContextManager[None]:
        """Hold ``servers`` for a measurement: no other measures them meanwhile, in any worker.

        A name holds an attached server (its URL is known before its gate), a handle any.
        """
        urls = [
            server.url
            if not isinstance(server, str)
            else getattr(self.settings.targets.get(server), "url", None)
            for server in servers
        ]
        return self.locks.hold(*filter(None, urls), during=during)

    def say(self, message: str) -> None:
        """Show a progress line live (redacted): the session's one channel for them."""
        self.progress(self.settings.redact(message))

    def gpu_probe(self) -> GpuProbe | None:
        """Return the session's GPU probe, or None (reason in ``gpu_skip_reason``).

        :raises GpuUnavailable: under ``--sglang-require`` when GPU state cannot be read.
        """
        if not self._gpu_checked:
            self._gpu_checked = True
            try:
                self._gpu = make_probe(
                    host=self.settings.gpu_host.value, fake_dir=self.settings.gpu_fake.value
                )
            except GpuUnavailable as exc:
                self.gpu_skip_reason = str(exc)
        if self._gpu is None and self.settings.require.value:
            raise GpuUnavailable(
                f"GPU state cannot be read ({self.gpu_skip_reason}) and --sglang-require is set"
                f" (from {self.settings.require.source}); install nvidia-ml-py on a GPU host, "
                "or drop --sglang-require for a dry run"
            )
        return self._gpu

    def gpu_names(self) -> list[str]:
        """Return the names of the GPUs the session's probe sees (empty without a probe)."""
        if self._gpu is not None and self._gpu_names is None:
            self._gpu_names = []  # unreadable: not asked again
            with contextlib.suppress(GpuUnavailable):
                self._gpu_names = [g.name for g in self._gpu.snapshot().gpus]
        return list(self._gpu_names or [])

    def get(self, name: str, *, during: str = "", why: str = "") -> SGLangServer:
        """Return the ready server ``name``: gated (attached) or launched on first use.

        ``during`` names who asks (a test id); ``why`` what for (the summary quotes it when a
        profile was launched again). Raises the gate's or launch's error, now or later.
        """
        if name in self._ready:
            died = self.check(name, during=during)
            if died is not None:
                raise died
            return self._ready[name]
        if name in self._failed:
            raise self._failed[name].extended(
                "\n  (this server failed earlier in the session; it is not tried again)"
            )
        target = self.settings.targets.get(name)
        if target is None:
            known = ", ".join(self.settings.targets) or "none"
            raise ServerUnavailable(
                f"no SGLang server or profile named {name!r} is configured (known: {known}); "
                f"attach it with --sglang-url {name}=URL or define [profiles.{name}] "
                "(see --sglang-profiles)"
            )
        try:
            with self.outside_test_timeout():
                if target.url is None:
                    server = self._launch(target, during=during, why=why)
                else:
                    with self.locks.hold(target.url, during=during):  # probes disturb a run
                        server = ReadinessGate.for_target(target, target.url, self.settings).wait()
        except SGLangError as exc:
            # "Not configured here" is cheap to find out again; a failed gate or launch is not.
            if not isinstance(exc, ServerUnavailable):
                self._failed[name] = exc
            raise
        except BaseException as exc:
            # Interrupted (a timeout, Ctrl-C) or a bug: never launched again either; later
            # tests that need the server fail at once, naming what stopped this one.
            what = " ".join(str(exc).split()) or "no message"
            self._failed[name] = ServerNotReady(
                self.settings.redact(
                    f"the start of SGLang server {name!r} was interrupted by "
                    f"{type(exc).__name__} ({what[:300]}); it is not retried in this session"
                ),
                phase="launch",
            )
            raise
        self._ready[name] = server
        if server.launch is not None and self.on_launched is not None:
            # While it is up, take what the selected tests declared for it (a relaunch
            # costs minutes); a failure there is the declaring test's, not this caller's.
            with self.outside_test_timeout():
                self.on_launched(server)
            return self.get(name, during=during)  # it may have died meanwhile
        return server

    def _launch(self, target: ServerTarget, *, during: str, why: str) -> SGLangServer:
        name, profile = target.name, target.profile
        assert profile is not None  # a target without a URL is a profile's
        missing = missing_launcher(profile, self.settings.launcher.value)
        # Nothing runs for a launcher that is missing, and an emulator without fake GPUs holds
        # none: no GPUs to check (or, for a missing one, to share out).
        checked = missing is None and not self.settings.launches_hold_no_gpus
        launch = Launch(
            target,
            self.settings,
            gpu=self.gpu_probe() if checked else None,
            visible_gpus=None if missing is not None else self._owned_gpus(name, profile.tp),
            progress=self.progress,
            log_path=self.log_dir / f"{name}-{len(self.launches) + 1}.log",
        )
        launch.info.requested_by, launch.info.reason = during or None, why or None
        self.launches.append(launch.info)
        if missing is not None:  # recorded as failed, with the command it would have run
            launch.info.outcome, launch.info.cause = "failed", self.settings.redact(missing)
            raise ServerUnavailable(
                f"cannot launch profile {name!r}: {missing}; install it, dry-run with "
                f"--sglang-launcher=emulator, or attach a running server with "
                f"--sglang-url {name}=URL\n  command: {' '.join(launch.info.command)}"
            )
        try:
            self.stop_running()  # they share the GPUs: one launched server at a time
        except SGLangError as exc:
            # The previous server's problem, not this profile's: record it and let this
            # launch's pre-flight judge the GPUs (it waits and names any holder).
            self.problems.append(str(exc))
            self.progress(f"sglang: {exc}")
        if self.flight_skip_reason and len(self.launches) == 1:
            self.progress(f"sglang: GPU pre/post-flight checks skipped: {self.flight_skip_reason}")
        self.progress(
            f"sglang: launching {name!r} with the {self.settings.launcher.value} launcher "
            f"(log {launch.info.log_path})"
        )
        # Running from its first moment: a start cut short (Ctrl-C) is still ours to stop.
        self._running = launch
        return launch.start()

    def _owned_gpus(self, name: str, tp: int) -> tuple[str, ...] | None:
        """Return this pytest-xdist worker's equal, disjoint share of the host's GPUs, or None."""
        if self.xdist_worker is None or self.settings.launches_hold_no_gpus:
            return None  # not a worker; or a launch that holds no GPU
        index, count = self.xdist_worker
        probe = self.gpu_probe()
        if probe is None:
            raise ServerNotReady(
                f"cannot launch profile {name!r} in pytest-xdist worker {index + 1} of {count}: "
                f"GPU state cannot be read ({self.gpu_skip_reason}), so the host's GPUs "
                "cannot be shared out between the workers; run launch mode without -n",
                phase="launch",
            )
        visible = visible_gpus(probe.snapshot(), os.environ)
        owned = worker_gpus(visible, index, count)
        if len(owned) < tp:
            raise ServerNotReady(
                f"profile {name!r} needs {tp} GPUs (tp={tp}), but pytest-xdist worker "
                f"{index + 1} of {count} owns {len(owned)} of the host's {len(visible)} "
                f"(each worker owns an equal share): run it with fewer workers (-n "
                f"{max(1, len(visible) // tp)}) or without -n",
                phase="launch",
            )
        return owned

    @property
    def flight_skip_reason(self) -> str | None:
        """Why launches are not checked against GPU state (pre/post-flight), if they are not."""
        if self.settings.launches_hold_no_gpus:
            return "the emulator launcher holds no GPU (ini sglang_gpu_fake = DIR simulates them)"
        return self.gpu_skip_reason

    def check(self, name: str, *, during: str = "", wait: float = 0.0) -> ServerDied | None:
        """Return the error describing server ``name``'s death, or None while it serves.

        Launched: its process exited (within ``wait`` s); attached: its port refuses
        connections. A dead server is marked failed for the rest of the session.
        """
        server = self._ready.get(name)
        if server is None:
            failed = self._failed.get(name)
            return failed if isinstance(failed, ServerDied) else None
        if server.launch is None:
            died = self._unreachable(server, during)
        else:  # a ready launched server is the running one
            assert self._running is not None
            died = self._running.check_alive(during, wait=wait)
        if died is not None:
            del self._ready[name]
            self._failed[name] = died
        return died

    def _unreachable(self, server: SGLangServer, during: str) -> ServerDied | None:
        # A refused connection is a server gone (a loopback connect costs microseconds); a
        # slow network is not: a timeout leaves the verdict to the test's own requests.
        try:
            with socket.create_connection(host_port(server.url), timeout=2.0):
                return None
        except (ConnectionRefusedError, ConnectionResetError) as exc:
            cause = exc.strerror or type(exc).__name__
        except OSError:
            return None
        found = f", found by {during}" if during else ""
        return ServerDied(
            self.settings.redact(
                f"SGLang server {server.name!r} at {server.url} no longer accepts connections "
                f"({cause}){found}: it died or was stopped after passing the readiness gate; "
                "check its host and logs (an attached server is not restarted by the plugin)"
            ),
            phase="serving",
            exit_code=None,
        )

    def stop_running(self) -> None:
        """Stop the launched server that is running, if any (its errors propagate).

        The latest launch stays ``_running`` once finished (then every call on it does nothing):
        a stop that Ctrl-C cut short is still ours to finish, and ``hurry`` may cut it short.
        """
        launch = self._running
        if launch is None or launch.finished:
            return
        self._ready.pop(launch.profile.name, None)
        try:
            launch.stop()
        finally:
            signals = launch.info.stop.signals if launch.info.stop is not None else []
            kill = next((sent for sent in signals if "SIGKILL" in sent), None)
            if kill is not None:
                self.problems.append(
                    f"SGLang server {launch.profile.name!r} (pid {launch.info.pid}) did not "
                    f"stop on SIGTERM: {kill} (its shutdown hangs, or it ignores SIGTERM)"
                )

    def hurry(self) -> None:
        """Kill the launched server now, without its grace period (a second Ctrl-C)."""
        if self._running is not None:
            self._running.hurry()

    def close(self) -> None:
        """Stop everything the pool started and release the GPU probe."""
        try:
            self.stop_running()
        finally:
            if self._gpu is not None:
                self._gpu.close()
                self._gpu = None


def host_port(url: str) -> tuple[str, int]:
    """Return the host (lower case) and port a URL reaches, the scheme's default if none."""
    parts = urlsplit(url)
    return (parts.hostname or "").lower(), parts.port or (443 if parts.scheme == "https" else 80)


def server_key(url: str) -> str:
    """Return the lock name of the server at ``url``: one name however the URL is spelt."""
    (host, port), parts = host_port(url), urlsplit(url)
    where = f"{parts.scheme}://{host}:{port}{parts.path.rstrip('/')}"
    return hashlib.sha256(where.encode()).hexdigest()[:20]


@dataclass(eq=False)
class ServerLocks:
    """Exclusive holds on servers, shared by every process that uses the same ``folder``.

    ``folder`` None: this process alone. ``owner`` is written in the lock for waiting processes.
    """

    folder: Path | None
    _: KW_ONLY
    owner: str = field(default_factory=lambda: f"pid {os.getpid()}")
    progress: Callable[[str], None] = lambda message: None
    #: The keys this process holds (reentrant: an inner hold of one does nothing).
    _held: set[str] = field(init=False, default_factory=set)

    @contextlib.contextmanager
    def hold(self, *urls: str, during: str = "") -> Iterator[None]:
        """Hold the servers at ``urls`` for the ``with`` block; wait while another holds one.

        ``during`` (a test id) is written in the lock, so that a waiting worker can say whom.
        """
        with contextlib.ExitStack() as stack:
            for key, url in sorted({server_key(url): url for url in urls}.items()):
                if self.folder is None or key in self._held:  # the outer hold has it
                    continue
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.folder / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                stack.callback(os.close, fd)  # closing the file releases the lock taken on it
                self._held.add(key)
                stack.callback(self._held.discard, key)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 1000, 0).decode(errors="replace").strip() or "another"
                    self.progress(
                        f"sglang: waiting for the server at {url}: {holder} is measuring it (one "
                        "measurement of a server at a time, across pytest-xdist workers)"
                    )
                    fcntl.flock(fd, fcntl.LOCK_EX)
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{self.owner}{f' in {during}' if during else ''}".encode(), 0)
            yield
