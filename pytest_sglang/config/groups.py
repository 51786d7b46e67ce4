"""Launch groups (tests tied by the servers they name), each kept whole on one runner or worker.

``--sglang-shard K/N`` splits a suite over N CI runners: no two shards launch the same profile;
pure and deterministic, so every runner computes the same split. Under pytest-xdist, each
worker writes the launch group of every test it collected to a folder shared with the
controller, whose scheduler keeps groups whole. Not xdist's ``loadgroup``: it renames test ids
and no longer groups with pytest 9.2 (#1386). Rules in docs/ci.md.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import Shard

__all__ = ["assign_shards", "configure_groups", "shared_folder"]

#: The ``workerinput`` key of the folder the session's workers share (groups, locks).
_SHARED = "sglang_shared"
#: Distribution modes that would spread the tests of one server over several workers.
_SPLITTING = ("loadscope", "loadfile", "worksteal")
#: Fixtures that give a test the default server when it names none.
_SERVER_FIXTURES = frozenset({"sglang_server", "sglang_bench", "sglang_servers"})

#: What gives the servers of a test.
ServersOf = Callable[[pytest.Item], frozenset[str]]


def _launch_groups(servers: Mapping[str, frozenset[str]]) -> list[tuple[frozenset[str], list[str]]]:
    """Return the launch groups: (profiles, test ids), tying profiles a test names together."""
    groups: list[tuple[frozenset[str], list[str]]] = []
    for test, names in servers.items():
        if names:
            joined = [g for g in groups if g[0] & names]
            groups = [g for g in groups if not g[0] & names]
            tests = [t for g in joined for t in g[1]]
            groups.append((names.union(*(g[0] for g in joined)), [*tests, test]))
    return [(profiles, sorted(tests)) for profiles, tests in groups]


def assign_shards(servers: Mapping[str, frozenset[str]], count: int) -> dict[str, int]:
    """Return the shard (1..``count``) of every test, given the server names each test uses."""
    load = [(0, 0, shard) for shard in range(count)]  # (launches, tests, index): least first
    shard_of: dict[str, int] = {}
    groups = sorted(_launch_groups(servers), key=lambda g: (-len(g[0]), -len(g[1]), sorted(g[0])))
    for profiles, members in groups:
        launches, tests, best = min(load)
        load[best] = (launches + len(profiles), tests + len(members), best)
        shard_of |= dict.fromkeys(members, best + 1)
    unnamed = sorted(test for test, names in servers.items() if not names)
    return shard_of | {test: position % count + 1 for position, test in enumerate(unnamed)}


def configure_groups(config: pytest.Config, settings: Settings, servers_named: ServersOf) -> int:
    """Keep launch groups whole: deal them to this ``--sglang-shard``, and to xdist's workers.

    ``servers_named``: the servers a test names. Return the number of workers in the
    controller of a distributed session with servers (0 elsewhere). A distribution mode that
    would split launch groups is a usage error.
    """
    default = settings.default_server()

    def servers_of(item: pytest.Item) -> frozenset[str]:
        """Return the servers ``item`` names, else the default one a fixture gives it."""
        fixtures = _SERVER_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        return servers_named(item) or frozenset({default} if fixtures and default else ())

    if settings.shard.value is not None:
        config.pluginmanager.register(_Shard(settings.shard.value, servers_of), "sglang-shard")
    folder = shared_folder(config)
    if folder is not None:
        groups = _WorkerGroups(folder / f"groups-{os.getpid()}.json", servers_of)
        config.pluginmanager.register(groups, "sglang-xdist-groups")
        return 0
    # xdist's own test for distribution (its pytest_cmdline_main ran before configure).
    dist = getattr(config.option, "dist", "no")
    workers = len(getattr(config.option, "tx", None) or []) if dist not in (None, "no") else 0
    if hasattr(config, "workerinput") or not workers or not settings.targets:
        return 0  # not the controller of a distributed session with servers to keep together
    if dist in _SPLITTING:
        raise pytest.UsageError(
            f"--dist {dist} would spread the tests of one SGLang server over several "
            "pytest-xdist workers (each would launch it, or measure it while another does); "
            "use -n N alone (or --dist load): the tests of each launch group then run on "
            "one worker"
        )
    shared = Path(tempfile.mkdtemp(prefix="pytest-sglang-xdist-"))
    config.pluginmanager.register(_Controller(shared, grouped=dist != "each"), "sglang-xdist")
    return workers


def shared_folder(config: pytest.Config) -> Path | None:
    """Return the folder the session's pytest-xdist workers share, in a worker; else None."""
    folder = getattr(config, "workerinput", {}).get(_SHARED)
    return Path(folder) if folder else None


@dataclass(eq=False)  # a plugin: hashed by identity
class _Shard:
    """Deselects the tests of other shards."""

    shard: Shard
    servers_of: ServersOf
    deselected: int = 0

    # trylast: after -k and -m. The declared measurements are read from what is left, at
    # pytest_collection_finish, whatever order the collection hooks ran in.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Keep this shard's tests, deselect the others (``pytest_deselected``)."""
        shard_of = assign_shards({i.nodeid: self.servers_of(i) for i in items}, self.shard.count)
        gone = [item for item in items if shard_of[item.nodeid] != self.shard.index]
        if gone:
            config.hook.pytest_deselected(items=gone)
        items[:] = [item for item in items if shard_of[item.nodeid] == self.shard.index]
        self.deselected = len(gone)

    @pytest.hookimpl
    def pytest_report_collectionfinish(self, items: list[pytest.Item]) -> list[str]:
        """Say what this shard runs: its tests, its profiles, what went to other shards."""
        profiles = ", ".join(sorted({n for item in items for n in self.servers_of(item)}))
        line = (
            f"sglang: shard {self.shard}: {len(items)} tests (servers: {profiles or 'none'}); "
            f"{self.deselected} tests run on the other shards"
        )
        if not items and self.deselected:
            line += "; nothing falls to this shard (fewer launch groups than shards)"
        return [line]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Exit 0, not 5, when the split alone left this shard without tests (CI fails on 5)."""
        if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and self.deselected:
            session.exitstatus = pytest.ExitCode.OK
            reporter = session.config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                reporter.write_line(
                    f"sglang: shard {self.shard} had no tests to run: exit status 0, not 5"
                )


@dataclass(eq=False)  # a plugin: hashed by identity
class _Controller:
    """In the controller: the shared folder, and the scheduler that reads the groups."""

    folder: Path
    #: Whether to schedule by launch group (not under ``--dist each``).
    grouped: bool

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Tell each worker, as it starts, where the session's workers share files."""
        node.workerinput[_SHARED] = str(self.folder)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Schedule whole launch groups: xdist's ``loadscope``, the workers' groups as scopes."""
        if not self.grouped:
            return None
        from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

        folder = self.folder
        groups: dict[str, str] = {}

        class LaunchGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
            def schedule(self) -> None:
                if self.collection is None:  # every collection is in: the groups are written
                    for file in sorted(folder.glob("groups-*.json")):
                        groups.update(json.loads(file.read_text(encoding="utf-8")))
                super().schedule()

            def _split_scope(self, nodeid: str) -> str:
                return groups.get(nodeid, nodeid)

        return LaunchGroupScheduling(config, log)

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        """Remove the shared folder (the groups and lock files)."""
        shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(eq=False)  # a plugin: hashed by identity
class _WorkerGroups:
    """In a worker: writes the launch group of every test it collected."""

    path: Path
    servers_of: ServersOf

    # First: xdist's own hook sends the collection, after which the controller schedules.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Write ``{test id: launch group}`` for the controller's scheduler.

        What ties a test to others: its servers and its ``xdist_group`` marks.
        """
        servers: dict[str, frozenset[str]] = {}
        for item in session.items:
            marks = item.iter_markers("xdist_group")
            tied = {f"xdist_group={m.args[0] if m.args else m.kwargs.get('name')}" for m in marks}
            servers[item.nodeid] = self.servers_of(item) | tied
        groups = {
            test: "sglang:" + "+".join(sorted(names))
            for names, tests in _launch_groups(servers)
            for test in tests
        }
        # Whole or not at all: the controller may read at any moment. (Not report/writing.py:
        # config may not import the report stage.)
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(groups), encoding="utf-8")
        os.replace(partial, self.path)
