"""Where a run's load is generated: this process, N processes on this host, or Ray actors.

Entry points for callers that take the choice from options (``--sglang-load-workers``,
``--sglang-ray-address``): :func:`closed_loop_on_workers` and :func:`open_loop_on_workers`.
Ray is imported only when a Ray address is given. ``docs/scaling.md`` says when more than
one process is needed. A :class:`~pytest_sglang.loadgen.ray_pools.RayPools` keeps the Ray
actors from run to run; ``sglang_bench`` keeps one for the session.
"""

from __future__ import annotations

from collections.abc import Callable

from pytest_sglang.loadgen.progress import ProgressCallback
from pytest_sglang.loadgen.ray_pools import RayPools
from pytest_sglang.loadgen.records import LoadRun
from pytest_sglang.loadgen.runner import LoadGenerator
from pytest_sglang.loadgen.schedule import Arrival
from pytest_sglang.loadgen.workers import RunPlan, run_sharded
from pytest_sglang.loadgen.workload import Workload

__all__ = ["closed_loop_on_workers", "open_loop_on_workers"]


def closed_loop_on_workers(
    generator: LoadGenerator,
    workload: Workload,
    concurrency: int,
    *,
    workers: int = 1,
    ray_address: str | None = None,
    ray_source: str = "--sglang-ray-address",
    repeat: int = 0,
    before_measured: Callable[[], object] | None = None,
    ray_pools: RayPools | None = None,
) -> LoadRun:
    """Run ``generator``'s closed loop where the options say: one process, N, or Ray actors.

    ``workers == 1`` without ``ray_address`` is the generator's own single-process run.
    Either way the generator's progress callback hears the run's progress (summed over the
    workers). ``workers > 1`` runs that many worker processes on this
    host (:func:`run_sharded`); a ``ray_address`` runs ``workers`` Ray actors on that cluster
    (:class:`~pytest_sglang.loadgen.ray_workers.RayLoadWorkers`, which imports Ray). Either
    way ``concurrency`` requests are in flight in total, and ``before_measured`` (taken from
    the call, not the generator) runs right before the common start of the measured requests.

    :param ray_source: where ``ray_address`` came from, for messages.
    :param ray_pools: where to keep the Ray actors for later runs (without: started for this
        run and killed after it).
    """
    if workers == 1 and ray_address is None:  # the generator's own before_measured applies
        return generator.run_closed_loop(workload, concurrency, repeat=repeat)
    plan = RunPlan(generator.options, workload, "closed", concurrency=concurrency, repeat=repeat)
    return _on_workers(
        plan, workers, ray_address, ray_source, before_measured, generator.progress, ray_pools
    )


def open_loop_on_workers(
    generator: LoadGenerator,
    workload: Workload,
    rate: float,
    *,
    arrival: Arrival = "poisson",
    max_concurrency: int | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    ray_source: str = "--sglang-ray-address",
    repeat: int = 0,
    before_measured: Callable[[], object] | None = None,
    ray_pools: RayPools | None = None,
) -> LoadRun:
    """Run ``generator``'s open loop where the options say, as :func:`closed_loop_on_workers`.

    Several workers share one arrival schedule (``rate`` in total, the Poisson schedule not
    distorted) and one cap (``max_concurrency`` in flight in total).
    """
    if workers == 1 and ray_address is None:
        return generator.run_open_loop(
            workload, rate, arrival=arrival, max_concurrency=max_concurrency, repeat=repeat
        )
    plan = RunPlan(
        generator.options, workload, "open", rate=rate, arrival=arrival,
        max_concurrency=max_concurrency, repeat=repeat,
    )  # fmt: skip
    return _on_workers(
        plan, workers, ray_address, ray_source, before_measured, generator.progress, ray_pools
    )


def _on_workers(
    plan: RunPlan,
    workers: int,
    ray_address: str | None,
    ray_source: str,
    before_measured: Callable[[], object] | None,
    progress: ProgressCallback,
    ray_pools: RayPools | None,
) -> LoadRun:
    if ray_address is None:
        return run_sharded(plan, workers, before_measured=before_measured, progress=progress)
    if ray_pools is not None:  # a failed run kills its actors; the next one starts fresh ones
        pool = ray_pools.get(ray_address, workers, ray_source)
        return pool.run(plan, before_measured=before_measured, progress=progress)
    once = RayPools()
    try:
        return once.get(ray_address, workers, ray_source).run(
            plan, before_measured=before_measured, progress=progress
        )
    finally:
        once.close()
