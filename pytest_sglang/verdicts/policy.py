"""What an inconclusive verdict does to its test: ``--sglang-inconclusive=fail|skip|warn``.

The verdict is always recorded as inconclusive; the option decides the test's outcome
(``docs/ci.md``, "Inconclusive verdicts"). Outside a plugin run the verdicts raise, as
``fail`` does.
"""

from __future__ import annotations

import warnings
from typing import Literal, NoReturn, Protocol

import pytest

from pytest_sglang.config.settings import SETTINGS_KEY
from pytest_sglang.errors import Inconclusive, SGLangWarning
from pytest_sglang.report.context import CURRENT_ITEM

__all__ = ["InconclusivePolicy", "inconclusive_policy", "settle_inconclusive"]

#: The choices of ``--sglang-inconclusive``.
InconclusivePolicy = Literal["fail", "skip", "warn"]


class Verdict(Protocol):
    """What the policy needs of a verdict (``verdicts/assertions.py``'s ``Verdict``)."""

    summary: str

    def message(self) -> str:
        """Return the failure text: summary, table, warnings."""
        ...


def inconclusive_policy() -> InconclusivePolicy:
    """Return the running test's session's policy (``fail`` outside a plugin test)."""
    item = CURRENT_ITEM.get()
    if item is None:
        return "fail"
    settings = item.config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return "fail"
    value = settings.inconclusive.value
    if value == "skip":
        return "skip"
    return "warn" if value == "warn" else "fail"


def _raise(verdict: Verdict) -> NoReturn:
    __tracebackhide__ = True
    raise Inconclusive(verdict.message(), verdict)


def settle_inconclusive(verdict: Verdict) -> None:
    """Fail, skip or warn for an inconclusive ``verdict``, as the session's policy says.

    The verdict must be recorded already (it is reported as inconclusive whatever happens).

    :raises Inconclusive: under ``fail``.
    """
    __tracebackhide__ = True
    policy = inconclusive_policy()
    if policy == "skip":
        pytest.skip(f"inconclusive (--sglang-inconclusive=skip): {verdict.summary}")
    if policy == "warn":
        warnings.warn(
            SGLangWarning(f"inconclusive (--sglang-inconclusive=warn): {verdict.message()}"),
            stacklevel=3,
        )
        return
    _raise(verdict)
