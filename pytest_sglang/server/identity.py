"""Identity checks: the model and configuration a server serves against expectations.

SGLang reports an argument not given on its command line as ``null`` in ``/server_info``; an
expectation on such a key is checked against the effective value (:data:`EFFECTIVE`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from pytest_sglang.config.values import Expectation
from pytest_sglang.server.handle import ModelCard, effective_max_running_requests

__all__ = [
    "EFFECTIVE",
    "MODEL_KEYS",
    "check_model_expectations",
    "check_server_info_expectations",
    "select_card",
]

#: Expectation keys answered by ``/v1/models``; every other key is a ``/server_info`` key.
MODEL_KEYS = frozenset({"model_id", "max_model_len"})


def _show(value: object) -> str:
    return json.dumps(value)


def select_card(cards: Sequence[ModelCard], expectations: Iterable[Expectation]) -> ModelCard:
    """Return the card named by a ``model_id`` expectation, else the first (base) card."""
    wanted = next((e.value for e in expectations if e.key == "model_id"), None)
    return next((c for c in cards if c.id == wanted), cards[0])


def check_model_expectations(
    cards: Sequence[ModelCard], expectations: Iterable[Expectation]
) -> list[str]:
    """Return one problem line per unmet ``model_id`` / ``max_model_len`` expectation."""
    expectations = list(expectations)
    card = select_card(cards, expectations)
    problems = []
    for expectation in expectations:
        if expectation.key == "model_id" and expectation.value not in [c.id for c in cards]:
            served = ", ".join(repr(c.id) for c in cards)
            problems.append(
                f"model_id: expected {_show(expectation.value)} (from {expectation.source}), "
                f"the server serves {served}"
            )
        elif expectation.key == "max_model_len" and card.max_model_len != expectation.value:
            problems.append(
                f"max_model_len: expected {_show(expectation.value)} (from "
                f"{expectation.source}), /v1/models reports {_show(card.max_model_len)} "
                f"for {card.id!r}"
            )
    return problems


#: ``/server_info`` keys that are ``null`` unless given, and where the effective value is.
EFFECTIVE = {
    "max_running_requests": "internal_states[*].effective_max_running_requests_per_dp, "
    "summed over DP ranks",
    "context_length": "/v1/models max_model_len",
}


def effective_value(
    key: str, server_info: dict[str, Any], models: Sequence[ModelCard] | None = None
) -> object:
    """Return the value the server runs with for a key :data:`EFFECTIVE` lists, or ``None``."""
    if key == "max_running_requests":
        return effective_max_running_requests(server_info)
    if key == "context_length" and models:
        return models[0].max_model_len
    return None


def check_server_info_expectations(
    server_info: dict[str, Any],
    expectations: Iterable[Expectation],
    endpoint: str,
    *,
    models: Sequence[ModelCard] | None = None,
) -> list[str]:
    """Return one problem line per unmet ``/server_info`` key expectation.

    A key that is ``null`` there but has an effective value elsewhere (:data:`EFFECTIVE`) is
    checked against that value; ``models`` (the ``/v1/models`` cards) supply the effective
    context length.
    """
    problems = []
    for expectation in expectations:
        if expectation.key in MODEL_KEYS:
            continue
        if expectation.key not in server_info:
            problems.append(
                f"{expectation.key}: expected {_show(expectation.value)} (from "
                f"{expectation.source}), but {endpoint} has no such key "
                f"(SGLang {server_info.get('version', '?')})"
            )
        elif server_info[expectation.key] is None and expectation.key in EFFECTIVE:
            problem = _check_effective(expectation, server_info, endpoint, models)
            if problem:
                problems.append(problem)
        elif not _equal(expectation.key, server_info[expectation.key], expectation.value):
            adaptive_off = expectation.key == "speculative_adaptive" and expectation.value is True
            problems.append(
                f"{expectation.key}: expected {_show(expectation.value)} (from "
                f"{expectation.source}), {endpoint} reports "
                f"{_show(server_info[expectation.key])}" + (_ADAPTIVE_OFF if adaptive_off else "")
            )
    return problems


#: Why ``speculative_adaptive`` reads false on a server launched with ``--speculative-adaptive``.
_ADAPTIVE_OFF = (
    ": SGLang turned adaptive speculation off at start-up and runs static speculation. It "
    "supports only --speculative-algorithm EAGLE or EAGLE3 with --speculative-eagle-topk 1, "
    "without attention DP, multi-layer EAGLE, two-batch overlap or pdmux; its log says "
    "'speculative_adaptive disabled: <reason>'"
)


def _check_effective(
    expectation: Expectation,
    server_info: dict[str, Any],
    endpoint: str,
    models: Sequence[ModelCard] | None,
) -> str | None:
    key, where = expectation.key, EFFECTIVE[expectation.key]
    effective = effective_value(key, server_info, models)
    head = (
        f"{key}: expected {_show(expectation.value)} (from {expectation.source}); {endpoint} "
        f"reports null (not set on the server's command line), "
    )
    if effective is None:
        hint = ", expect max_model_len instead" if key == "context_length" else ""
        return f"{head}and the effective value ({where}) is not available here{hint}"
    if _equal(key, effective, expectation.value):
        return None
    return f"{head}the effective value is {_show(effective)} ({where})"


#: Keys SGLang upper-cases while resolving (``--speculative-algorithm eagle3`` → ``EAGLE3``).
_CASE_INSENSITIVE_KEYS = frozenset({"speculative_algorithm"})


def _equal(key: str, actual: object, expected: object) -> bool:
    if key in _CASE_INSENSITIVE_KEYS and isinstance(actual, str) and isinstance(expected, str):
        return actual.upper() == expected.upper()
    # 8 and 8.0 are the same number, but True is not 1 here.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    return actual == expected
