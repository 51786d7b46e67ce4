"""Where a run's load is generated: this process, N processes on this host, or Ray actors.

The choice only: the run loop is the same everywhere; ``docs/scaling.md`` says when more
than one process is needed.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_sglang.loadgen.ray_pools import RayPools
from pytest_sglang.loadgen.records import LoadRun
from pytest_sglang.loadgen.runner import LoadGenerator, run_blocking
from pytest_sglang.loadgen.schedule import Load
from pytest_sglang.loadgen.workers import Coordination, RunPlan, run_sharded
from pytest_sglang.loadgen.workload import Workload

__all__ = ["run_on_workers"]


def run_on_workers(
    generator: LoadGenerator,
    workload: Workload,
    load: Load,
    *,
    workers: int = 1,
    ray_address: str | None = None,
    ray_source: str = "sglang_ray_address",
    repeat: int = 0,
    before_measured: Callable[[], object] | None = None,
    ray_pools: RayPools | None = None,
) -> LoadRun:
    """Run ``generator``'s ``load`` where the options say: one process, N, or Ray actors.

    ``workers == 1`` without ``ray_address`` is the generator's own run in this process (its
    own ``before_measured`` applies); else ``workers`` processes on this host
    (:func:`~pytest_sglang.loadgen.workers.run_sharded`), or Ray actors on the cluster at
    ``ray_address`` (which came from ``ray_source``), kept in ``ray_pools`` for later runs
    (without: killed after this one).
    The generator's progress callback hears the summed progress, ``before_measured``
    runs right before the common start, and a run cut short keeps its finished part in
    ``generator.interrupted_run``, as in one process.
    """
    if workers == 1 and ray_address is None:
        return run_blocking(generator.run(workload, load, repeat=repeat))
    plan = RunPlan(generator.options, workload, load, repeat)

    def keep(finished: LoadRun) -> None:
        generator.interrupted_run = finished

    coordination = Coordination(
        before_measured=before_measured, progress=generator.progress, interrupted=keep
    )
    if ray_address is None:
        return run_sharded(plan, workers, **coordination)
    # A failed run kills its actors; the next one starts fresh ones.
    pools = RayPools() if ray_pools is None else ray_pools
    try:
        actors = pools.get(ray_address, workers, ray_source)
        return actors.run(plan, **coordination)
    finally:
        if ray_pools is None:
            pools.close()
