"""The fake-GPU file (``gpus.json``, ini key ``sglang_gpu_fake``): its format and its one reader.

The fake probe reads it for GPU state and the settings check it at start-up; the emulator
reads the same format with its own checker (it imports nothing from the plugin).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["FAKE_GPUS_FORMAT", "read_fake_gpus"]

#: An example of the format, quoted in every message about a malformed file.
FAKE_GPUS_FORMAT = '{"gpus": [{"uuid": "GPU-0", "name": "NVIDIA H200", "total_mib": 143771}]}'


def read_fake_gpus(path: Path) -> list[dict[str, Any]]:
    """Return the GPUs a ``gpus.json`` lists, each checked; a ``ValueError`` names file and key."""
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text; write it as {FAKE_GPUS_FORMAT}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            f"write it as {FAKE_GPUS_FORMAT}"
        ) from None
    gpus = spec.get("gpus") if isinstance(spec, dict) else None
    if not isinstance(gpus, list):
        raise ValueError(f"{path}: no 'gpus' list; write it as {FAKE_GPUS_FORMAT}")
    for index, gpu in enumerate(gpus):
        where = f"{path}: gpus[{index}]"
        if not isinstance(gpu, dict):
            raise ValueError(f"{where} is not an object; write it as {FAKE_GPUS_FORMAT}")
        for key in ("uuid", "name", "total_mib"):
            if key not in gpu:
                raise ValueError(f"{where} has no {key!r}; write it as {FAKE_GPUS_FORMAT}")
        for key in ("uuid", "name"):
            if not isinstance(gpu[key], str):
                raise ValueError(f"{where}[{key!r}] must be a string, got {gpu[key]!r}")
        for key in ("total_mib", "base_used_mib"):
            value = gpu.get(key, 0)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"{where}[{key!r}] must be a whole number of MiB (0 or more), got {value!r}"
                )
    return gpus
