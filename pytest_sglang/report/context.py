"""The test being run, for code that is called from tests without a fixture at hand.

Verdicts (``assert_faster``...) record their evidence in the running test's
``user_properties`` for the report; the plugin sets this around each test call.
"""

from __future__ import annotations

import contextvars

import pytest

from pytest_sglang.report.entries import Entry

__all__ = ["CURRENT_ITEM", "record"]

CURRENT_ITEM: contextvars.ContextVar[pytest.Item | None] = contextvars.ContextVar(
    "pytest_sglang_current_item", default=None
)


def record(entry: Entry) -> None:
    """Append ``("sglang", entry)`` to the running test's ``user_properties``, if any."""
    item = CURRENT_ITEM.get()
    if item is not None:
        item.user_properties.append(("sglang", entry))
