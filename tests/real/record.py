"""Record the real server's answers to the differential probes (a tool, not a test).

    python -m tests.real.record [--out tests/real/recorded/sglang-0.5.23-cpu.json]

Launches the tier's real SGLang 0.5.23 server (``bash real_sglang/setup.sh`` first), sends
:data:`tests.real.differential.PROBES`, stops the server, and writes every observation with
the startup phase order. Local paths are replaced by ``MODEL_DIR``, ``PYTHON`` and ``HOME``.
The recording backs the tests that need a real answer without a real server (the identity
checks against a ``/server_info`` with nulls, the comparator's planted differences).
"""

# ruff: noqa: T201  (a command-line tool: it prints)
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.real import differential, realserver

DEFAULT_OUT = Path(__file__).resolve().parent / "recorded" / "sglang-0.5.23-cpu.json"


def sanitize(value: Any, replacements: dict[str, str]) -> Any:
    """``value`` with every occurrence of a local path replaced by its placeholder."""
    if isinstance(value, dict):
        return {k: sanitize(v, replacements) for k, v in value.items()}
    if isinstance(value, list):
        return [sanitize(v, replacements) for v in value]
    if isinstance(value, str):
        for old, new in replacements.items():
            value = value.replace(old, new)
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    tier = realserver.find_tier()
    if isinstance(tier, str):
        print(tier, file=sys.stderr)
        return 1
    port = realserver.free_port()
    command = realserver.real_command(tier, port)
    with tempfile.TemporaryDirectory() as tmp:
        run = realserver.start("real", command, port, Path(tmp), env=realserver.real_env())
        try:
            seen = differential.observe(run.url)
        finally:
            stopped = run.stop()
    replacements = {
        str(tier.model): "MODEL_DIR",
        str(tier.python): "PYTHON",
        str(Path.home()): "HOME",
    }
    data = {
        "source": "real SGLang 0.5.23 on CPU, the tier's tiny model (real_sglang/)",
        "command": sanitize(command, replacements),
        "startup": run.startup.phase_order(),
        "ready_after": run.ready_after,
        "stop": {
            "seconds": stopped.seconds,
            "exit_code": stopped.exit_code,
            "left": stopped.left,
        },
        "observations": {name: sanitize(obs.as_json(), replacements) for name, obs in seen.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(
        f"ready after {run.ready_after:.1f}s, stopped in {stopped.seconds:.1f}s; "
        f"{len(seen)} observations -> {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
