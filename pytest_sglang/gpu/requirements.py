"""The ``sglang_requires`` marker: the GPUs a test needs, against what this machine has."""

from __future__ import annotations

from typing import Any

from pytest_sglang.gpu.model import GIB, GpuSnapshot

__all__ = ["unmet_requirement"]


def unmet_requirement(snapshot: GpuSnapshot, requirement: dict[str, Any]) -> str | None:
    """Return why ``snapshot`` misses ``requirement`` (the marker's kwargs), or None.

    ``gpus`` (default 1), ``gpu_name`` (in the name, any case), ``min_free_gib``.
    """
    count = int(requirement.get("gpus", 1))
    name = requirement.get("gpu_name")
    min_free = requirement.get("min_free_gib")
    matching = [
        g
        for g in snapshot.gpus
        if (name is None or str(name).lower() in g.name.lower())
        and (min_free is None or g.memory_free >= float(min_free) * GIB)
    ]
    if len(matching) >= count:
        return None
    wanted = f"{count} GPU{'s' if count != 1 else ''}"
    if name is not None:
        wanted += f" named like {name!r}"
    if min_free is not None:
        wanted += f" with >= {float(min_free):g} GiB free"
    found = (
        "; ".join(
            f"GPU {g.index} {g.name} ({g.memory_free / GIB:.1f} GiB free)" for g in snapshot.gpus
        )
        or "no GPU"
    )
    return f"requires {wanted}; found {len(matching)} such: {found}"
