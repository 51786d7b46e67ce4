"""pytest-timeout and server launches: a launch never counts against a test's timeout.

A server launch and its readiness wait belong to the session, not to the test that first
needs the server: they can take minutes, and the ready timeout bounds them.
:class:`TimeoutBridge` follows pytest-timeout's hooks (``pytest_timeout_set_timer`` /
``pytest_timeout_cancel_timer``) to know which test's timer is armed, and
:meth:`TimeoutBridge.suspended` cancels that timer around a launch and re-arms it with the
time the test had left. Going through the hooks works for both of pytest-timeout's methods
(signal and thread); without pytest-timeout, or a timeout for the test, it does nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

__all__ = ["BRIDGE_KEY", "MIN_REARM_SECONDS", "TimeoutBridge"]

#: The least a re-armed timer gets: a test whose time ran out during the launch still gets
#: a moment to run, rather than a timer of zero seconds (which pytest-timeout reads as none).
MIN_REARM_SECONDS = 1.0


@dataclass
class _Armed:
    item: pytest.Item
    settings: Any  # pytest_timeout.Settings (a namedtuple with .timeout)
    started: float


class TimeoutBridge:
    """Knows the armed pytest-timeout timer; suspends it around server launches.

    Registered as a plugin by ``pytest_sglang.plugin``; the hooks are optional, so the
    bridge is harmless where pytest-timeout is not installed.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._armed: _Armed | None = None

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> None:
        """Note the timer pytest-timeout is about to arm (it still arms it)."""
        self._armed = _Armed(item, settings, self._clock())

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_timeout_cancel_timer(self, item: pytest.Item) -> None:
        """Note that the test's timer is cancelled (pytest-timeout still cancels it)."""
        if self._armed is not None and self._armed.item is item:
            self._armed = None

    @contextlib.contextmanager
    def suspended(self) -> Iterator[None]:
        """Run the block with the armed test timer (if any) stopped; re-arm it afterwards.

        The re-armed timer gets what the test had left when the block began (at least
        :data:`MIN_REARM_SECONDS`), so time spent in the test itself still counts.
        """
        armed = self._armed
        if armed is None or not getattr(armed.settings, "timeout", None):
            yield
            return
        hook = armed.item.config.hook
        began = self._clock()
        left = float(armed.settings.timeout) - (began - armed.started)
        hook.pytest_timeout_cancel_timer(item=armed.item)
        try:
            yield
        finally:
            settings = armed.settings._replace(timeout=max(left, MIN_REARM_SECONDS))
            hook.pytest_timeout_set_timer(item=armed.item, settings=settings)


#: The session's bridge (registered by the plugin at configure time).
BRIDGE_KEY = pytest.StashKey[TimeoutBridge]()
