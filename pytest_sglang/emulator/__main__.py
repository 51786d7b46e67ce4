"""``python -m pytest_sglang.emulator``: the SGLang emulator's entry point."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Parse SGLang's flags, run the emulated server, return the exit status."""
    # Imported here so that `import pytest_sglang.emulator.__main__` stays cheap.
    from pytest_sglang.emulator import lifecycle
    from pytest_sglang.emulator.config import cli
    from pytest_sglang.emulator.config.server_args import ServerArgsError
    from pytest_sglang.emulator.runtime import logs

    try:
        config = cli.parse_args(sys.argv[1:] if argv is None else argv)
    except ServerArgsError as exc:
        # SGLang fails in ServerArgs.__post_init__, before logging is set up.
        sys.stderr.write(f"Traceback (most recent call last):\n  ServerArgs.__post_init__\n{exc}\n")
        return 1
    args = config.server_args
    logs.configure(args["log_level"], args["log_level_http"])
    code = asyncio.run(lifecycle.run(config))
    logs.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
