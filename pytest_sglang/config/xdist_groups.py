"""pytest-xdist: the tests of one launch group run on one worker.

Each worker writes the launch group of every test it collected to a folder shared with the
controller, whose scheduler keeps groups whole (docs/ci.md). Not xdist's ``loadgroup``: it
renames test ids and no longer groups with pytest 9.2 (#1386).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.shards import launch_groups, servers_used

__all__ = ["configure_xdist", "read_groups", "shared_folder"]

#: The ``workerinput`` key of the folder the session's workers share (groups, locks).
_SHARED = "sglang_shared"
#: Distribution modes that would spread the tests of one server over several workers.
_SPLITTING = ("loadscope", "loadfile", "worksteal")


def configure_xdist(
    config: pytest.Config,
    settings: Settings,
    servers_of: Callable[[pytest.Item], frozenset[str]],
) -> int:
    """In the controller, schedule by launch group; in a worker, write the groups.

    Return the number of workers in the controller of a distributed session with servers
    (0 elsewhere). A distribution mode that would split launch groups is a usage error.
    """
    folder = shared_folder(config)
    if folder is not None:
        worker = str(getattr(config, "workerinput", {}).get("workerid", "gw"))
        path = folder / f"groups-{worker}.json"
        groups = _WorkerGroups(path, servers_of, settings.default_server())
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
    config.pluginmanager.register(_Controller(grouped=dist != "each"), "sglang-xdist")
    return workers


def shared_folder(config: pytest.Config) -> Path | None:
    """Return the folder the session's pytest-xdist workers share, in a worker; else None."""
    folder = getattr(config, "workerinput", {}).get(_SHARED)
    return Path(folder) if folder else None


def read_groups(folder: Path) -> dict[str, str]:
    """Return the launch group of every test the workers wrote (test id -> group)."""
    files = sorted(folder.glob("groups-*.json"))
    return {k: v for f in files for k, v in json.loads(f.read_text(encoding="utf-8")).items()}


@dataclass(eq=False)  # a plugin: hashed by identity
class _Controller:
    """In the controller: the shared folder, and the scheduler that reads the groups."""

    #: Whether to schedule by launch group (not under ``--dist each``).
    grouped: bool
    folder: Path | None = None

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """Tell each worker, as it starts, where the session's workers share files."""
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="pytest-sglang-xdist-"))
        node.workerinput[_SHARED] = str(self.folder)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """Schedule whole launch groups: xdist's ``loadscope``, the workers' groups as scopes."""
        if not self.grouped or self.folder is None:
            return None
        from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

        folder, groups = self.folder, {}

        class LaunchGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
            def schedule(self) -> None:
                if self.collection is None:  # every collection is in: the groups are written
                    groups.update(read_groups(folder))
                super().schedule()

            def _split_scope(self, nodeid: str) -> str:
                return groups.get(nodeid, nodeid)

        return LaunchGroupScheduling(config, log)

    @pytest.hookimpl
    def pytest_unconfigure(self) -> None:
        """Remove the shared folder (the groups and lock files)."""
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


@dataclass(eq=False)  # a plugin: hashed by identity
class _WorkerGroups:
    """In a worker: writes the launch group of every test it collected."""

    path: Path
    servers_of: Callable[[pytest.Item], frozenset[str]]
    default: str | None

    def servers(self, item: pytest.Item) -> frozenset[str]:
        """Return what ties ``item`` to other tests: its servers and ``xdist_group`` marks."""
        names = set(servers_used(item, self.servers_of, self.default))
        for mark in item.iter_markers("xdist_group"):
            names.add(f"xdist_group={mark.args[0] if mark.args else mark.kwargs.get('name')}")
        return frozenset(names)

    # First: xdist's own hook sends the collection, after which the controller schedules.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Write ``{test id: launch group}`` for the controller's scheduler."""
        servers = {item.nodeid: self.servers(item) for item in session.items}
        groups = {
            test: "sglang:" + "+".join(sorted(names))
            for names, tests in launch_groups(servers)
            for test in tests
        }
        # Whole or not at all: the controller may read at any moment. (Not report/writing.py:
        # config may not import the report stage.)
        partial = self.path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(groups), encoding="utf-8")
        os.replace(partial, self.path)
