"""assert_greedy_equivalent against emulators: a baseline, an EAGLE3 server, a faulty one."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from pytest_sglang.errors import MeasurementFailed, PerformanceAssertionError
from pytest_sglang.testing import EAGLE3_FLAGS, EmulatorProcess, running_emulator
from pytest_sglang.verdicts.assertions import Verdict
from pytest_sglang.verdicts.greedy import assert_greedy_equivalent

PROMPTS: list[str | list[int]] = [
    "The capital of France is",
    "Tell me about the river",
    [2001, 2002, 2003],
]


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EmulatorProcess]]:
    """A baseline, an EAGLE3 server and an EAGLE3 server whose output drifts at token 5."""
    flags = {
        "base": (),
        "eagle3": EAGLE3_FLAGS,
        "broken": (*EAGLE3_FLAGS, "--emulator-fault", "spec-diverge=5"),
    }
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(running_emulator(tmp_path_factory.mktemp(name), *args))
            for name, args in flags.items()
        }


def test_speculative_server_returns_the_baselines_greedy_tokens(
    servers: dict[str, EmulatorProcess],
) -> None:
    verdict = assert_greedy_equivalent(
        servers["eagle3"].url, servers["base"].url, PROMPTS, max_new_tokens=12
    )
    assert verdict.passed and verdict.evidence["divergences"] == []
    assert verdict.table.count("identical") == len(PROMPTS)


def test_first_divergence_names_prompt_position_tokens_and_text(
    servers: dict[str, EmulatorProcess],
) -> None:
    spec, base = servers["broken"].url, servers["base"].url
    with pytest.raises(PerformanceAssertionError) as info:
        assert_greedy_equivalent(spec, base, PROMPTS, max_new_tokens=12)
    verdict = info.value.verdict
    assert isinstance(verdict, Verdict)
    first = verdict.evidence["divergences"][0]
    assert (first["request"], first["position"]) == (0, 5)
    assert first["spec_token"] != first["base_token"]
    assert len(verdict.evidence["divergences"]) == len(PROMPTS)
    message = str(info.value)
    assert "diverges" in message and "prompt 0, output token 5" in message
    assert f"{first['spec_token']} vs {first['base_token']}" in message
    assert "|" in first["spec_text"] and first["spec_text"] != first["base_text"]
    # Shorter outputs than the divergence point are identical: the fault is at token 5.
    assert assert_greedy_equivalent(spec, base, PROMPTS, max_new_tokens=5).passed


def test_a_failed_request_is_reported_not_judged(
    servers: dict[str, EmulatorProcess],
) -> None:
    with pytest.raises(MeasurementFailed, match=r"HTTP 400 .*context length"):
        assert_greedy_equivalent(
            servers["eagle3"].url, servers["base"].url, PROMPTS, max_new_tokens=10**7
        )
    with pytest.raises(ValueError, match="at least one prompt"):
        assert_greedy_equivalent(servers["eagle3"].url, servers["base"].url, [])
