"""The plugin's markers: their documentation and their validation at collection time."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from pytest_sglang.settings import Expectation, is_valid_server_name

__all__ = ["MARKERS", "expectations_of", "profile_of", "validate_markers"]

#: Marker lines for ``config.addinivalue_line("markers", ...)``; ``pytest --markers`` shows them.
MARKERS = (
    "sglang_profile(name): run this test against the SGLang server called NAME "
    "(attach one with --sglang-url NAME=URL). The closest marker wins, so a test can "
    "override its module's or class's choice.",
    "sglang_expect(**key_values): check, for this test, that the server serves what it "
    "expects: model_id=..., max_model_len=..., or any /server_info key such as tp_size=8 or "
    "speculative_algorithm='EAGLE3'. Overrides --sglang-expect for the same key.",
)


def profile_of(item: pytest.Item) -> str | None:
    """Return the server name the closest ``sglang_profile`` marker asks for, if any."""
    marker = item.get_closest_marker("sglang_profile")
    return str(marker.args[0]) if marker is not None else None


def expectations_of(item: pytest.Item) -> list[Expectation]:
    """Return the test's ``sglang_expect`` expectations, closest marker first for each key."""
    found: dict[str, Expectation] = {}
    for marker in item.iter_markers("sglang_expect"):
        for key, value in marker.kwargs.items():
            found.setdefault(
                key,
                Expectation(
                    key=key, value=value, source=f"@pytest.mark.sglang_expect on {item.nodeid}"
                ),
            )
    return list(found.values())


def validate_markers(items: Iterable[pytest.Item]) -> None:
    """Reject malformed markers before any test runs.

    :raises pytest.UsageError: naming the test, the marker and the fix.
    """
    for item in items:
        for marker in item.iter_markers("sglang_profile"):
            name = marker.args[0] if len(marker.args) == 1 else None
            if marker.kwargs or not isinstance(name, str):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_profile takes exactly one server "
                    f"name, got args={marker.args!r} kwargs={marker.kwargs!r}; write e.g. "
                    "@pytest.mark.sglang_profile('eagle3')"
                )
            if not is_valid_server_name(name):
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_profile({name!r}): not a valid "
                    "server name; use letters, digits, '_', '.' or '-'"
                )
        for marker in item.iter_markers("sglang_expect"):
            if marker.args or not marker.kwargs:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.sglang_expect takes keyword arguments only, "
                    f"got args={marker.args!r}; write e.g. "
                    "@pytest.mark.sglang_expect(max_model_len=131072, tp_size=8)"
                )
