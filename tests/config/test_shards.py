"""``--sglang-shard K/N`` (issue 17): whole launch groups per shard, the same split everywhere."""

from __future__ import annotations

import itertools
import random

import pytest

from pytest_sglang.config.groups import assign_shards
from pytest_sglang.config.parsing import parse_shard
from pytest_sglang.config.values import Shard


def test_parse() -> None:
    assert parse_shard("2/3") == Shard(2, 3) and str(parse_shard(" 1 / 1 ")) == "1/1"
    for bad in ("0/2", "3/2", "1/0", "1", "a/b", "1/2/3", "-1/2"):
        with pytest.raises(ValueError):
            parse_shard(bad)


SERVERS = {
    "t::a1": frozenset({"a"}), "t::a2": frozenset({"a"}),
    "t::b1": frozenset({"b"}), "t::c1": frozenset({"c"}),
    "t::b_vs_c": frozenset({"b", "c"}),  # ties b and c into one launch group
    "t::d1": frozenset({"d"}),
    "t::plain1": frozenset(), "t::plain2": frozenset(), "t::plain3": frozenset(),
}  # fmt: skip


def test_whole_launch_groups_balanced_by_launches() -> None:
    shard_of = assign_shards(SERVERS, 2)
    assert set(shard_of) == set(SERVERS)
    for profile in "abcd":
        shards = {shard_of[t] for t, names in SERVERS.items() if profile in names}
        assert len(shards) == 1, f"{profile} is launched on shards {shards}"
    # {b, c} (2 launches) first to shard 1, then a and d (1 each) to shard 2.
    assert shard_of["t::b_vs_c"] == 1 and shard_of["t::a1"] == 2 and shard_of["t::d1"] == 2
    assert [shard_of[f"t::plain{i}"] for i in (1, 2, 3)] == [1, 2, 1]


def test_the_split_does_not_depend_on_collection_order() -> None:
    expected = assign_shards(SERVERS, 3)
    items = list(SERVERS.items())
    for seed in range(5):
        random.Random(seed).shuffle(items)
        assert assign_shards(dict(items), 3) == expected


def test_more_shards_than_groups_leaves_some_empty() -> None:
    shard_of = assign_shards({"t::a": frozenset({"a"})}, 3)
    assert shard_of == {"t::a": 1}


SUITE = """
import pytest
from pytest_sglang import Workload

W = Workload(input_len=8, output_len=4, requests=4)

@pytest.mark.sglang_profile("a")
def test_a1(): pass

@pytest.mark.sglang_profile("a")
def test_a2(): pass

@pytest.mark.sglang_profile("b")
def test_b1(): pass

@pytest.mark.sglang_measure("b", "c", workload=W)
def test_b_vs_c(sglang_bench): pass

def test_plain(): pass
"""

PROFILES = """
[tool.pytest-sglang.profiles.a]
model-path = "m/a"
[tool.pytest-sglang.profiles.b]
model-path = "m/b"
[tool.pytest-sglang.profiles.c]
model-path = "m/c"
"""


def _collected(result: pytest.RunResult) -> set[str]:
    return {line.split("::")[1] for line in result.outlines if line.startswith("test_suite.py::")}


def test_shards_of_a_suite_cover_it_once(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(PROFILES)
    pytester.makepyfile(test_suite=SUITE)
    seen: list[set[str]] = []
    for index in (1, 2):
        result = pytester.runpytest(f"--sglang-shard={index}/2", "--collect-only", "-q")
        assert result.ret == pytest.ExitCode.OK
        seen.append(_collected(result))
    assert seen == [{"test_b1", "test_b_vs_c", "test_plain"}, {"test_a1", "test_a2"}]
    assert not set.intersection(*seen)
    result = pytester.runpytest("--sglang-shard=1/2", "-p", "no:randomly", "--co")
    result.stdout.fnmatch_lines([
        "sglang: shard: 1/2 (from --sglang-shard on the command line)",
        "*",
        "sglang: shard 1/2: 3 tests (servers: b, c); 2 tests run on the other shards",
    ])  # fmt: skip


def test_an_empty_shard_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(PROFILES)
    pytester.makepyfile(test_suite="import pytest\n\n@pytest.mark.sglang_profile('a')\n"
                        "def test_a(): pass\n")  # fmt: skip
    result = pytester.runpytest("--sglang-shard=2/2")
    # A CI job treats exit 5 (no tests) as a failure: a shard with nothing to do has passed.
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "*shard 2/2: 0 tests*nothing falls to this shard (fewer launch groups than shards)*",
        "*sglang: shard 2/2 had no tests to run: exit status 0, not 5*",
    ])  # fmt: skip


def test_a_suite_without_tests_still_exits_5_under_a_shard(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(PROFILES)
    pytester.makepyfile(test_suite="def helper(): pass\n")
    result = pytester.runpytest("--sglang-shard=1/2")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.mark.parametrize("value", ["3/2", "half", "0/1"])
def test_a_bad_shard_is_a_usage_error(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest(f"--sglang-shard={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        f"*--sglang-shard: *{value}* (from --sglang-shard on the command line); give K/N with "
        "1 <= K <= N, e.g. 1/2 and 2/2 on two runners"
    ])  # fmt: skip


def test_every_shard_count_partitions() -> None:
    for count in range(1, 6):
        shard_of = assign_shards(SERVERS, count)
        assert set(shard_of.values()) <= set(range(1, count + 1))
        pairs = itertools.combinations(SERVERS, 2)
        for x, y in pairs:
            if SERVERS[x] & SERVERS[y]:
                assert shard_of[x] == shard_of[y]


def test_tests_of_the_default_server_go_to_one_shard(pytester: pytest.Pytester) -> None:
    # Unmarked tests that use a server get the default one (the only profile): dealt out
    # round-robin, every shard would launch it; as under -n N, they go with that server.
    pytester.makepyprojecttoml(PROFILES.split("[tool.pytest-sglang.profiles.b]")[0])
    pytester.makepyfile(test_suite="def test_x(sglang_server): pass\n\n"
                        "def test_y(sglang_server): pass\n\n"
                        "def test_z(sglang_bench): pass\n\n"
                        "def test_plain1(): pass\n\n"
                        "def test_plain2(): pass\n")  # fmt: skip
    seen = []
    for index in (1, 2):
        result = pytester.runpytest(f"--sglang-shard={index}/2", "--co", "-q")
        assert result.ret == pytest.ExitCode.OK
        seen.append(_collected(result))
    assert seen == [{"test_x", "test_y", "test_z", "test_plain1"}, {"test_plain2"}]
    result = pytester.runpytest("--sglang-shard=1/2", "--co")
    result.stdout.fnmatch_lines(["sglang: shard 1/2: 4 tests (servers: a); 1 tests run *"])
