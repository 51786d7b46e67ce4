"""The reaper: stops a launched server when the pytest process that launched it is gone.

Blocks until the pipe on its stdin closes (after a normal teardown, or when pytest died),
then runs the same teardown: ``python -m pytest_sglang.server.reaper LAUNCH_ID PGID``.
"""

from __future__ import annotations

import os
import signal
import sys

from pytest_sglang.server.process import DEFAULT_GRACE, kill_ours


def main(argv: list[str]) -> int:
    """Wait for EOF on stdin, then stop every process of the launch."""
    launch_id, pgid = argv[0], int(argv[1])
    # Only EOF ends the wait: a Ctrl-C meant for pytest must not take the reaper with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while os.read(sys.stdin.fileno(), 4096):
        pass
    kill_ours(launch_id, pgid, DEFAULT_GRACE, exclude=[os.getpid()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
