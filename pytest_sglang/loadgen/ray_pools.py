"""Ray load-worker actors kept from run to run (starting them costs a second or two a run).

Importing this module imports neither Ray nor the load generator: ``sglang_bench`` holds one
:class:`RayPools` for the session and closes it at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_sglang.loadgen.ray_workers import RayLoadWorkers

__all__ = ["RayPools"]


class RayPools:
    """Ray load-worker actors kept from run to run, one set per cluster address and size."""

    def __init__(self) -> None:
        self._pools: dict[tuple[str, int], RayLoadWorkers] = {}

    def get(self, address: str, workers: int, source: str) -> RayLoadWorkers:
        """Return the actors for ``address`` and ``workers``, connecting the first time."""
        from pytest_sglang.loadgen.ray_workers import RayLoadWorkers  # imports Ray

        key = (address, workers)
        if key not in self._pools:
            self._pools[key] = RayLoadWorkers(workers, address=address, source=source)
        return self._pools[key]

    def close(self) -> None:
        """Kill every actor kept (the Ray connection stays)."""
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
