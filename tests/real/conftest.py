"""The real-SGLang tier's fixtures: the tier, and at most one real server at a time.

Tests here skip, with the reason and the setup command, where the tier is not set up (``bash
real_sglang/setup.sh``). A real server costs ~30-60 s to start on a 2-core machine, so the
session shares one (:meth:`RealServers.shared`) among the tests that only send it requests;
tests that need a server of their own (a launch by the plugin, another model) call
:meth:`RealServers.exclusive` first, which stops the shared one. A file lock in the tier's
folder keeps a second pytest process on this machine from starting another server at the
same time (it waits, then skips).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real import realserver
from tests.real.realserver import ServerRun, Tier

#: Seconds a session waits for another process's real server to go away before skipping.
LOCK_WAIT = 600.0

TIER = realserver.find_tier()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, keep the tier's tests on one worker (``--dist loadgroup``).

    One real server at a time: tests spread over two workers would wait for each other's.
    """
    if not config.pluginmanager.hasplugin("xdist"):
        return
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.xdist_group("real-sglang"))


#: Set by .ci/run: a tier that is not set up fails the tests instead of skipping them.
REQUIRED = realserver.ENVIRON.get("PYTEST_SGLANG_REQUIRE_REAL", "") not in ("", "0")


def unavailable(reason: str) -> None:
    """Skip with ``reason``; fail under ``PYTEST_SGLANG_REQUIRE_REAL=1`` (CI)."""
    if REQUIRED:
        pytest.fail(f"{reason} (PYTEST_SGLANG_REQUIRE_REAL is set)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def tier() -> Tier:
    """The set-up tier, or a skip saying how to set it up."""
    if isinstance(TIER, str):
        unavailable(TIER)
    assert isinstance(TIER, Tier)
    return TIER


class RealServers:
    """The session's real servers: one shared, or one exclusive test's own, never two."""

    def __init__(self, tier: Tier, log_dir: Path) -> None:
        self.tier = tier
        self.log_dir = log_dir
        self._shared: ServerRun | None = None
        self._lock: contextlib.ExitStack | None = None
        self.launches: list[ServerRun] = []

    def _acquire(self) -> None:
        if self._lock is not None:
            return
        stack = contextlib.ExitStack()
        if not stack.enter_context(realserver.tier_lock(self.tier.home, LOCK_WAIT)):
            stack.close()
            unavailable(
                f"another process held the real tier's server lock for {LOCK_WAIT:.0f}s "
                f"({self.tier.home / '.server.lock'}): one real server at a time"
            )
        self._lock = stack

    def shared(self) -> ServerRun:
        """The session's shared real server (the tier's model), started on first use."""
        if self._shared is not None and self._shared.alive():
            return self._shared
        self._acquire()
        port = realserver.free_port()
        run = realserver.start(
            "real-shared",
            realserver.real_command(self.tier, port),
            port,
            self.log_dir,
            env=realserver.real_env(),
        )
        self.launches.append(run)
        self._shared = run
        return run

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Stop the shared server (if running) and hold the slot for the ``with`` block."""
        self.stop_shared()
        self._acquire()
        yield

    def start_own(self, name: str, model: Path | None = None) -> ServerRun:
        """Start a real server of the test's own (inside :meth:`exclusive`)."""
        port = realserver.free_port()
        run = realserver.start(
            name,
            realserver.real_command(self.tier, port, model=model),
            port,
            self.log_dir,
            env=realserver.real_env(),
        )
        self.launches.append(run)
        return run

    def stop_shared(self) -> None:
        """Stop the shared server; the next :meth:`shared` starts a fresh one."""
        if self._shared is not None:
            self._shared.stop()
            self._shared = None

    def close(self) -> list[int]:
        """Stop everything this session started; release the lock; return pids left."""
        left = [pid for run in self.launches for pid in run.stop().left]
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        return left


@pytest.fixture(scope="session")
def real_servers(tier: Tier, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServers]:
    """The session's real servers (started lazily; all stopped at the end)."""
    servers = RealServers(tier, tmp_path_factory.mktemp("real-sglang"))
    try:
        yield servers
    finally:
        left = servers.close()
    # Teardown leaves nothing: every pid seen in the servers' process groups is gone.
    assert not left, f"processes left after stopping the real servers: {left}"


@pytest.fixture
def real_server(real_servers: RealServers) -> ServerRun:
    """The shared real SGLang 0.5.23 server (the tier's tiny model, vocabulary 32000)."""
    return real_servers.shared()
