"""The pytest-xdist scheduler that keeps each launch group on one worker.

xdist's ``loadscope`` scheduling, with the launch groups the workers wrote at collection
(``xdist_groups.py``) as its scopes: whole groups go to one worker, the other tests one by
one. Imported only in a pytest-xdist controller.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling  # type: ignore[import-untyped]

__all__ = ["LaunchGroupScheduling"]


class LaunchGroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
    """Schedules whole launch groups: the tests of one server run on one worker.

    :param groups: returns every test's launch group (test id -> group); read when the
        workers have sent their collections, each having written its groups before.
    """

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
