from __future__ import annotations

from pathlib import Path

import pytest

from pytest_sglang.loadgen.prompts import chat_text, token_ids
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.workload import Workload
from pytest_sglang.measure.measurement import measure
from pytest_sglang.testing import running_emulator
from pytest_sglang.verdicts.decision import Outcome, compare

SHARED = Workload(input_len=512, output_len=8, requests=64, warmup=0, prefix_groups=8,
                  prefix_len=448)  # fmt: skip


def test_requests_of_a_group_share_exactly_the_prefix() -> None:
    first, same_group, other_group = (token_ids(SHARED, "s", i) for i in (0, 8, 1))
    assert first[:448] == same_group[:448] and first[448:] != same_group[448:]
    assert first[:1] != other_group[:1] or first[:448] != other_group[:448]
    assert len(first) == 512
    # Another run (salt) starts cold: its prefixes differ.
    assert token_ids(SHARED, "t", 0)[:448] != first[:448]
    chat = Workload(input_len=20, output_len=4, endpoint="chat", prefix_groups=2, prefix_len=15)
    a, b = chat_text(chat, "s", 0).split(), chat_text(chat, "s", 2).split()
    assert a[:15] == b[:15] and len(a) == 20


def test_the_construction_implies_a_hit_ratio() -> None:
    assert SHARED.expected_cache_hit_ratio() == pytest.approx(56 / 64 * 448 / 512)
    assert Workload(input_len=8, output_len=1).expected_cache_hit_ratio() == 0.0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"prefix_groups": 2, "prefix_len": 512}, "prefix_len must be an integer in"),
        ({"prefix_groups": 0, "prefix_len": 8}, "prefix_groups must be an integer >= 1"),
        ({"prefix_len": 8}, "prefix_groups must be an integer >= 1"),
    ],
)
def test_bad_shared_prefixes_are_refused(changes: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Workload(input_len=512, output_len=8, **changes)  # type: ignore[arg-type]


@pytest.mark.slow
def test_the_hit_ratio_is_measured_and_the_cache_cuts_ttft(tmp_path: Path) -> None:
    """Against the emulator: the ratio the construction implies, and a TTFT verdict.

    The control is the same workload on a server without a prefix cache
    (``--disable-radix-cache``): flushing before each run could not stop a run's requests from
    hitting the prefixes its own earlier requests cached.
    """
    flags = ("--emulator-engine", "batch", "--emulator-speedup", "4")
    runs, control = [], []
    with running_emulator(tmp_path, *flags) as emulator:
        generator = LoadGenerator(emulator.url, flush_cache=True)
        runs = [measure(generator.run_closed_loop(SHARED, 4, repeat=r)) for r in range(5)]
    with running_emulator(tmp_path, *flags, "--disable-radix-cache") as emulator:
        generator = LoadGenerator(emulator.url)
        control = [measure(generator.run_closed_loop(SHARED, 4, repeat=r)) for r in range(5)]
    expected = SHARED.expected_cache_hit_ratio()
    for run in runs:
        assert run.failed == 0
        assert run.cache_hit_ratio is not None
        assert abs(run.cache_hit_ratio - expected) <= 0.02, (run.cache_hit_ratio, expected)
    assert all(run.cache_hit_ratio == 0.0 for run in control)
    verdict = compare(
        [v for run in runs if (v := run.get("ttft")) is not None],
        [v for run in control if (v := run.get("ttft")) is not None],
        larger_is_better=False,
        metric="ttft",
    )
    assert verdict.outcome is Outcome.PASS, verdict.table()
