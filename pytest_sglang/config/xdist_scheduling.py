"""The pytest-xdist scheduler that keeps each launch group on one worker.

``loadscope`` with the groups the workers wrote as scopes; imported only in a controller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

__all__ = ["LaunchGroupScheduling"]


class LaunchGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """Schedules whole launch groups, read (by ``groups``) once every collection is in."""

    def __init__(
        self, config: pytest.Config, log: Any, groups: Callable[[], dict[str, str]]
    ) -> None:
        super().__init__(config, log)
        self._read = groups
        self._groups: dict[str, str] = {}

    def schedule(self) -> None:
        """Read the groups, then schedule (xdist calls this once all collections are in)."""
        if self.collection is None:
            self._groups = self._read()
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return self._groups.get(nodeid, nodeid)
