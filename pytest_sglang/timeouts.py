"""pytest-timeout and server launches: a launch never counts against a test's timeout.

A launch and its readiness wait belong to the session (the ready timeout bounds them), not to
the test that first needs the server. :class:`TimeoutBridge` follows pytest-timeout's hooks to
know the armed timer, and :meth:`TimeoutBridge.suspended` cancels it around a launch and
re-arms it with the time the test had left: that works for both of pytest-timeout's methods.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

#: The least a re-armed timer gets: a zero-second timer would read as none to pytest-timeout.
MIN_REARM_SECONDS = 1.0


class TimeoutBridge:
    """Knows the armed pytest-timeout timer; suspends it around server launches.

    Its hooks are optional: without pytest-timeout (or a timeout for the test) it does nothing.
    """

    def __init__(self) -> None:
        #: The test whose timer is armed, pytest-timeout's settings for it, and when.
        self._armed: tuple[pytest.Item, Any, float] | None = None

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> None:
        """Note the timer pytest-timeout is about to arm (it still arms it)."""
        self._armed = (item, settings, time.monotonic())

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> None:
        """Note that the test's timer is cancelled (pytest-timeout still cancels it)."""
        if self._armed is not None and self._armed[0] is item:
            self._armed = None

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Run the block with the test timer stopped; re-arm it with what the test had left."""
        if self._armed is None or not getattr(self._armed[1], "timeout", None):
            yield
            return
        item, settings, started = self._armed
        left = float(settings.timeout) - (time.monotonic() - started)
        item.config.hook.pytest_timeout_cancel_timer(item=item)
        try:
            yield
        finally:
            rearmed = settings._replace(timeout=max(left, MIN_REARM_SECONDS))
            item.config.hook.pytest_timeout_set_timer(item=item, settings=rearmed)


#: The session's bridge (registered by the plugin at configure time).
BRIDGE_KEY = pytest.StashKey[TimeoutBridge]()
