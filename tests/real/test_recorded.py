"""The plugin against a real server's answers, without a server: the recorded /server_info.

A real SGLang 0.5.23 reports ``context_length`` and ``max_running_requests`` as ``null``
when they were not given. The identity checks and the comparability warning resolve the
effective values (``max_model_len`` in ``/v1/models``,
``internal_states[0].effective_max_running_requests_per_dp``) and say so.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pytest_sglang.config.values import Expectation
from pytest_sglang.server.handle import (
    ModelCard,
    ReadinessTimings,
    SGLangServer,
    effective_max_running_requests,
)
from pytest_sglang.server.readiness import (
    check_model_expectations,
    check_server_info_expectations,
)
from pytest_sglang.verdicts.assertions import confounders
from tests.bench_data import result

RECORDING = Path(__file__).resolve().parent / "recorded" / "sglang-0.5.23-cpu.json"


def recorded(probe: str) -> Any:
    return json.loads(RECORDING.read_text())["observations"][probe]["body"]


SERVER_INFO: dict[str, Any] = recorded("server_info")
CARDS = [ModelCard.from_json(card) for card in recorded("models")["data"]]


def expect(**pairs: object) -> list[Expectation]:
    return [Expectation(key, value, "pyproject.toml profile 'x'") for key, value in pairs.items()]


def test_the_recording_has_the_nulls() -> None:
    assert SERVER_INFO["context_length"] is None
    assert SERVER_INFO["max_running_requests"] is None
    assert SERVER_INFO["internal_states"][0]["effective_max_running_requests_per_dp"] == 2048
    assert CARDS[0].max_model_len == 4096


def test_expectations_on_null_keys_pass_on_the_effective_values() -> None:
    assert (
        check_server_info_expectations(
            SERVER_INFO, expect(max_running_requests=2048, tp_size=1), "/server_info"
        )
        == []
    )
    assert (
        check_server_info_expectations(
            SERVER_INFO, expect(context_length=4096), "/server_info", models=CARDS
        )
        == []
    )
    assert check_model_expectations(CARDS, expect(max_model_len=4096, model_id="tiny")) == []


def test_a_wrong_expectation_names_the_null_and_the_effective_value() -> None:
    (problem,) = check_server_info_expectations(
        SERVER_INFO, expect(max_running_requests=48), "/server_info"
    )
    assert problem == (
        "max_running_requests: expected 48 (from pyproject.toml profile 'x'); /server_info "
        "reports null (not set on the server's command line), the effective value is 2048 "
        "(internal_states[*].effective_max_running_requests_per_dp, summed over DP ranks)"
    )
    (problem,) = check_server_info_expectations(
        SERVER_INFO, expect(context_length=131072), "/server_info", models=CARDS
    )
    assert "reports null" in problem and "the effective value is 4096" in problem
    assert "/v1/models max_model_len" in problem


def test_context_length_without_the_cards_says_where_to_look() -> None:
    (problem,) = check_server_info_expectations(
        SERVER_INFO, expect(context_length=4096), "/server_info"
    )
    assert "reports null" in problem and "expect max_model_len instead" in problem


def test_a_given_value_is_compared_as_reported() -> None:
    # Under EAGLE SGLang declares 48: /server_info says 48, as the example profile expects.
    eagle = {**SERVER_INFO, "max_running_requests": 48, "speculative_algorithm": "EAGLE3"}
    assert (
        check_server_info_expectations(
            eagle, expect(max_running_requests=48, speculative_algorithm="eagle3"), "/server_info"
        )
        == []
    )


def test_the_server_handle_resolves_effective_values() -> None:
    server = SGLangServer(
        name="real", url="http://x", model=CARDS[0], models=tuple(CARDS),
        model_info=recorded("model_info"), server_info=SERVER_INFO,
        readiness=ReadinessTimings({}, 0),
    )  # fmt: skip
    assert server.max_running_requests == 2048
    assert server.context_length == 4096
    # MODEL_DIR (the recording's placeholder) is not a directory here: unknown.
    assert server.vocab_size is None
    two_ranks = {**SERVER_INFO, "internal_states": SERVER_INFO["internal_states"] * 2}
    assert effective_max_running_requests(two_ranks) == 4096


def test_the_eagle_cap_warning_on_a_server_whose_server_info_says_null() -> None:
    base = result("baseline", [10, 11], concurrency=64, config=dict(SERVER_INFO))
    spec_config = {**SERVER_INFO, "max_running_requests": 48, "speculative_algorithm": "EAGLE3"}
    del spec_config["internal_states"]  # what BenchResult.config holds today: CONFIG_KEYS
    spec = result("eagle3", [12, 13], concurrency=64, config=spec_config)
    (warning,) = [w for w in confounders(spec, base) if "at most" in w]
    # The baseline's effective limit (2048) is read from internal_states, not its null.
    assert "eagle3 runs at most 48 requests at once" in warning
    assert "the other runs up to 2048" in warning
    # With only CONFIG_KEYS (max_running_requests null, no internal_states): still warned.
    bare = {k: SERVER_INFO[k] for k in ("model_path", "tp_size", "max_running_requests")}
    base = dataclasses.replace(base, config=bare)
    (warning,) = [w for w in confounders(spec, base) if "at most" in w]
    assert "baseline's /server_info reports max_running_requests null" in warning
    # Below the cap there is nothing to warn about.
    low = dataclasses.replace(spec, concurrency=8)
    assert not [w for w in confounders(low, dataclasses.replace(base, concurrency=8))
                if "at most" in w]  # fmt: skip
