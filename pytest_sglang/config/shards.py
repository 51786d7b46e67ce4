"""``--sglang-shard K/N``: split a suite over N CI runners, whole launch groups per runner.

No two shards launch the same profile; pure and deterministic, so every runner computes the
same split (rules in docs/ci.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pytest

__all__ = [
    "Shard",
    "ShardSelector",
    "assign_shards",
    "launch_groups",
    "parse_shard",
    "servers_used",
]

#: Fixtures that give a test the default server when it names none.
_SERVER_FIXTURES = frozenset({"sglang_server", "sglang_bench", "sglang_servers"})


@dataclass(frozen=True)
class Shard:
    """One shard of a split suite: number ``index`` (from 1) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(raw: str) -> Shard:
    """Parse ``K/N`` (shape checked by the schema); ``ValueError(problem, fix)`` unless 1<=K<=N."""
    index, count = (int(part) for part in raw.split("/"))
    if not 1 <= index <= count:
        problem = f"{raw!r}: K must be between 1 and N, and N at least 1"
        raise ValueError(problem, "give K/N with 1 <= K <= N, e.g. 1/2 and 2/2 on two runners")
    return Shard(index, count)


def servers_used(
    item: pytest.Item, servers_of: Callable[[pytest.Item], frozenset[str]], default: str | None
) -> frozenset[str]:
    """Return the servers ``item`` uses: those it names, else the default one a fixture gives."""
    names = servers_of(item)
    if names or default is None or not _SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
        return names
    return frozenset({default})


def launch_groups(servers: Mapping[str, frozenset[str]]) -> list[tuple[frozenset[str], list[str]]]:
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
    launches = [0] * count
    tests = [0] * count
    shard_of: dict[str, int] = {}
    groups = sorted(launch_groups(servers), key=lambda g: (-len(g[0]), -len(g[1]), sorted(g[0])))
    for profiles, members in groups:
        best = min(range(count), key=lambda s: (launches[s], tests[s], s))
        launches[best] += len(profiles)
        tests[best] += len(members)
        for test in members:
            shard_of[test] = best + 1
    unnamed = sorted(test for test, names in servers.items() if not names)
    for position, test in enumerate(unnamed):
        shard_of[test] = position % count + 1
    return shard_of


@dataclass(eq=False)  # a plugin: hashed by identity
class ShardSelector:
    """Deselects the tests of other shards (``plugin.py`` registers it under the option)."""

    shard: Shard
    servers_of: Callable[[pytest.Item], frozenset[str]]
    #: The server a test that names none gets (``Settings.default_server``).
    default: str | None = None
    kept: list[str] = field(default_factory=list)
    profiles: set[str] = field(default_factory=set)
    deselected: int = 0

    # trylast: after -k and -m. The declared measurements are read from what is left, at
    # pytest_collection_finish, whatever order the collection hooks ran in.
    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Keep this shard's tests, deselect the others (``pytest_deselected``)."""
        servers = {i.nodeid: servers_used(i, self.servers_of, self.default) for i in items}
        shard_of = assign_shards(servers, self.shard.count)
        kept = [item for item in items if shard_of[item.nodeid] == self.shard.index]
        gone = [item for item in items if shard_of[item.nodeid] != self.shard.index]
        if gone:
            config.hook.pytest_deselected(items=gone)
        items[:] = kept
        self.kept = [item.nodeid for item in kept]
        self.profiles = {name for item in kept for name in servers[item.nodeid]}
        self.deselected = len(gone)

    @pytest.hookimpl
    def pytest_report_collectionfinish(self) -> list[str]:
        """Say what this shard runs: its tests, its profiles, what went to other shards."""
        profiles = ", ".join(sorted(self.profiles)) or "none"
        line = (
            f"sglang: shard {self.shard}: {len(self.kept)} tests (servers: {profiles}); "
            f"{self.deselected} tests run on the other shards"
        )
        if not self.kept and self.deselected:
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
