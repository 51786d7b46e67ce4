"""Identity checks: the model and configuration a server serves against expectations."""

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
    for e in expectations:
        if e.key == "model_id" and e.value not in [c.id for c in cards]:
            served = ", ".join(repr(c.id) for c in cards)
            problems.append(f"{_expected(e)}, the server serves {served}")
        elif e.key == "max_model_len" and card.max_model_len != e.value:
            reported = json.dumps(card.max_model_len)
            problems.append(f"{_expected(e)}, /v1/models reports {reported} for {card.id!r}")
    return problems


#: ``/server_info`` keys that are ``null`` unless given, and where the effective value is.
EFFECTIVE = {
    "max_running_requests": "internal_states[*].effective_max_running_requests_per_dp, "
    "summed over DP ranks",
    "context_length": "/v1/models max_model_len",
}


def check_server_info_expectations(
    server_info: dict[str, Any],
    expectations: Iterable[Expectation],
    endpoint: str,
    *,
    models: Sequence[ModelCard] | None = None,
) -> list[str]:
    """Return one problem line per unmet ``/server_info`` key expectation.

    A key SGLang reports ``null`` (not given) is checked against its :data:`EFFECTIVE` value.
    """
    problems = []
    for e in (e for e in expectations if e.key not in MODEL_KEYS):
        actual = server_info.get(e.key)
        if e.key not in server_info:
            version = server_info.get("version", "?")
            problems.append(f"{_expected(e)}, but {endpoint} has no such key (SGLang {version})")
        elif actual is None and e.key in EFFECTIVE:
            where, effective = EFFECTIVE[e.key], models[0].max_model_len if models else None
            if e.key == "max_running_requests":
                effective = effective_max_running_requests(server_info)
            head = f"{_expected(e)}; {endpoint} reports null (not set on the server's command line)"
            if effective is None:
                hint = ", expect max_model_len instead" if e.key == "context_length" else ""
                problems.append(
                    f"{head}, and the effective value ({where}) is not available here{hint}"
                )
            elif not _equal(e.key, effective, e.value):
                problems.append(f"{head}, the effective value is {json.dumps(effective)} ({where})")
        elif not _equal(e.key, actual, e.value):
            adaptive_off = e.key == "speculative_adaptive" and e.value is True
            problems.append(
                f"{_expected(e)}, {endpoint} reports {json.dumps(actual)}"
                + (_ADAPTIVE_OFF if adaptive_off else "")
            )
    return problems


def _expected(e: Expectation) -> str:
    return f"{e.key}: expected {json.dumps(e.value)} (from {e.source})"


#: Why ``speculative_adaptive`` reads false on a server launched with ``--speculative-adaptive``.
_ADAPTIVE_OFF = (
    ": SGLang turned adaptive speculation off at start-up and runs static speculation. It "
    "supports only --speculative-algorithm EAGLE or EAGLE3 with --speculative-eagle-topk 1, "
    "without attention DP, multi-layer EAGLE, two-batch overlap or pdmux; its log says "
    "'speculative_adaptive disabled: <reason>'"
)


#: Keys SGLang upper-cases while resolving (``--speculative-algorithm eagle3`` → ``EAGLE3``).
_CASE_INSENSITIVE_KEYS = frozenset({"speculative_algorithm"})


def _equal(key: str, actual: object, expected: object) -> bool:
    if key in _CASE_INSENSITIVE_KEYS and isinstance(actual, str) and isinstance(expected, str):
        return actual.upper() == expected.upper()
    # 8 and 8.0 are the same number, but True is not 1 here.
    if isinstance(actual, bool) or isinstance(expected, bool):
        return actual is expected
    return actual == expected
