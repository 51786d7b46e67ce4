"""``--emulator-gpu-dir DIR``: the fake GPUs ``DIR/gpus.json`` lists, checked when parsing flags.

The format is the plugin's fake probe's (``{"gpus": [{"uuid", "name", "total_mib",
"base_used_mib"}]}``); the emulator checks it itself, as it imports nothing from the plugin.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["GPUS_FORMAT", "read_gpus"]

#: An example of ``gpus.json``, quoted in every message about a malformed one.
GPUS_FORMAT = '{"gpus": [{"uuid": "GPU-0", "name": "NVIDIA H200", "total_mib": 143771}]}'


def read_gpus(path: Path) -> list[dict[str, Any]]:
    """Return the GPUs ``gpus.json`` lists, each checked (the plugin checks the same format).

    :raises ValueError: naming the file and the key that is wrong, and the format.
    """
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read as JSON ({exc}); write {GPUS_FORMAT}") from None
    gpus = spec.get("gpus") if isinstance(spec, dict) else None
    if not isinstance(gpus, list) or not all(isinstance(gpu, dict) for gpu in gpus):
        raise ValueError(f"{path}: no 'gpus' list of objects; write {GPUS_FORMAT}")
    for index, gpu in enumerate(gpus):
        for key, kind in (("uuid", str), ("name", str), ("total_mib", int)):
            value = gpu.get(key)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(
                    f"{path}: gpus[{index}][{key!r}] must be a "
                    + ("string" if kind is str else "whole number of MiB")
                    + f", got {value!r}; write {GPUS_FORMAT}"
                )
    return gpus
