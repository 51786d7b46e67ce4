"""GPU hygiene around a launch: clean before (pre-flight), released after (post-flight).

A zombie server holding the weights makes the next launch fail: pre-flight refuses held GPUs,
post-flight waits for the memory to come back; both name the holders.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from pytest_sglang.errors import GpuMemoryNotReleased, GpuNotClean
from pytest_sglang.gpu.model import GIB, MIB, GpuProcess, GpuSnapshot
from pytest_sglang.gpu.probes import GpuProbe

__all__ = ["postflight", "preflight", "server_gpus", "visible_gpus", "worker_gpus"]

#: A GPU counts as clean below this much used memory (v2 "used" of an idle GPU is ~0).
PREFLIGHT_MAX_USED = 1 * GIB
#: Seconds to wait for a previous server's memory before calling a GPU unclean.
PREFLIGHT_WAIT = 10.0
#: Seconds to wait after teardown for the memory to come back: the last TP rank to exit
#: releases it, which takes seconds on a TP=8 server.
RELEASE_TIMEOUT = 60.0
#: Slack over the pre-launch baseline still counted as released.
RELEASE_TOLERANCE = 256 * MIB


def visible_gpus(snapshot: GpuSnapshot, env: Mapping[str, str]) -> tuple[str, ...]:
    """Return the UUIDs of the GPUs a process with ``env`` sees, in CUDA's order.

    ``CUDA_VISIBLE_DEVICES`` (indices or UUID prefixes) is read as CUDA does: up to the first
    invalid entry.
    """
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(g.uuid for g in snapshot.gpus)
    uuids: list[str] = []
    for entry in (e.strip() for e in visible.split(",")):
        if entry.isascii() and entry.isdigit() and int(entry) < len(snapshot.gpus):
            uuids.append(snapshot.gpus[int(entry)].uuid)
            continue
        matches = [g.uuid for g in snapshot.gpus if entry and g.uuid.startswith(entry)]
        if len(matches) != 1:
            break  # CUDA stops at the first invalid entry
        uuids.append(matches[0])
    return tuple(uuids)


def worker_gpus(visible: Sequence[str], index: int, count: int) -> tuple[str, ...]:
    """Return pytest-xdist worker ``index``'s equal, contiguous share of ``visible``.

    A TP group stays on neighbouring GPUs; a remainder is left unused.
    """
    share = len(visible) // count
    return tuple(visible[index * share : (index + 1) * share])


def server_gpus(snapshot: GpuSnapshot, tp: int, env: Mapping[str, str]) -> tuple[str, ...]:
    """Return the first ``tp`` visible GPUs of a server with ``env``; GpuNotClean when too few."""
    visible = env.get("CUDA_VISIBLE_DEVICES")
    uuids = visible_gpus(snapshot, env)
    if len(uuids) < tp:
        found = ", ".join(f"{g.index}: {g.name}" for g in snapshot.gpus) or "none"
        raise GpuNotClean(
            f"the server needs {tp} GPUs (tp={tp}) but only {len(uuids)} are visible "
            f"(CUDA_VISIBLE_DEVICES={visible!r}; GPUs: {found}); lower tp or free more GPUs"
        )
    return tuple(uuids[:tp])


def _holders(snapshot: GpuSnapshot, uuids: Sequence[str]) -> str:
    lines = []
    for uuid in uuids:
        gpu = snapshot.gpu(uuid)
        holders = ", ".join(p.describe() for p in snapshot.only([uuid]).processes)
        used = f"{gpu.memory_used / GIB:.1f} GiB used by {holders or 'no process listed'}"
        lines.append(f"  GPU {gpu.index} ({gpu.name}, {uuid}): {used}")
    return "\n".join(lines)


def _wait(
    probe: GpuProbe,
    held: Callable[[GpuSnapshot], list[str]],
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> tuple[GpuSnapshot, list[str], float]:
    """Snapshot until ``held`` names no GPU or ``timeout`` passed; the last, its GPUs, the time."""
    start = clock()
    while held(snapshot := probe.snapshot()) and clock() - start < timeout:
        sleep(0.2)
    return snapshot, held(snapshot), clock() - start


def preflight(
    probe: GpuProbe,
    uuids: Sequence[str],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> GpuSnapshot:
    """Return the baseline once the GPUs are clean; GpuNotClean listing the holders if not."""

    def dirty(snapshot: GpuSnapshot) -> list[str]:
        held = {p.gpu_uuid for p in snapshot.processes}
        return [u for u in uuids if u in held or snapshot.gpu(u).memory_used > PREFLIGHT_MAX_USED]

    snapshot, held, _ = _wait(probe, dirty, PREFLIGHT_WAIT, clock, sleep)
    if held:
        raise GpuNotClean(
            f"GPUs needed by the launch are not clean (over {PREFLIGHT_MAX_USED / GIB:.1f} GiB "
            f"used or with compute processes) after waiting {PREFLIGHT_WAIT:g}s, per "
            f"{probe.describe()}:\n{_holders(snapshot, held)}\n"
            "  fix: stop those processes (a leftover server?) or pick other GPUs with "
            "CUDA_VISIBLE_DEVICES in the profile's env"
        )
    return snapshot


def postflight(
    probe: GpuProbe,
    uuids: Sequence[str],
    baseline: GpuSnapshot,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Wait until memory on ``uuids`` is back to ``baseline``; return the seconds it took.

    GpuMemoryNotReleased names the pids still holding memory.
    """

    def new(snapshot: GpuSnapshot) -> tuple[GpuProcess, ...]:
        return baseline.diff(snapshot.only(uuids)).new_processes

    def held(snapshot: GpuSnapshot) -> list[str]:
        limit = {u: baseline.gpu(u).memory_used + RELEASE_TOLERANCE for u in uuids}
        over = {u for u in uuids if snapshot.gpu(u).memory_used > limit[u]}
        return sorted(over | {p.gpu_uuid for p in new(snapshot)})

    snapshot, gpus, took = _wait(probe, held, RELEASE_TIMEOUT, clock, sleep)
    if gpus:
        pids = ", ".join(map(str, sorted({p.pid for p in new(snapshot)}))) or "none listed"
        raise GpuMemoryNotReleased(
            f"GPU memory not back to the pre-launch baseline {RELEASE_TIMEOUT:g}s after teardown "
            f"(per {probe.describe()}); still held by pid(s) {pids}:\n"
            f"{_holders(snapshot, gpus)}\n"
            "  fix: find and stop those processes; the next launch will refuse these GPUs"
        )
    return took
