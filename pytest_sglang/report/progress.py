"""Progress lines during a long launch or measurement, where a CI log shows them live.

A launch can take minutes and a sweep longer: the pool, the launcher and the bench report
progress through a one-line callback (``progress=``), each at its own rate (a launch's first
line after 5 s, then every 15 s; a measurement's every 10 s; one-off notes once). This module
is where those lines go:

* on the controller (and without xdist): the terminal reporter's ``write_line``, with output
  capturing suspended around it, then flushed, so the line reaches a pipe (a CI runner's log,
  not a TTY) when it is written and not when a buffer fills;
* on a pytest-xdist worker, whose terminal output nobody reads: the worker's standard error,
  which xdist leaves connected to the controller's, on a line of its own, prefixed with the
  worker's id (``[gw1] sglang: ...``), capturing suspended around it as well.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

__all__ = ["progress_writer"]


def progress_writer(config: pytest.Config) -> Callable[[str], None]:
    """Return a function that shows one progress line live, past output capturing."""
    capture = config.pluginmanager.get_plugin("capturemanager")
    workerinput = getattr(config, "workerinput", None)

    def uncaptured(write: Callable[[], None]) -> None:
        if capture is not None:
            with capture.global_and_fixture_disabled():
                write()
        else:
            write()

    if workerinput is not None:
        prefix = f"[{workerinput.get('workerid', 'worker')}] "

        def to_stderr(line: str) -> None:
            # A line of its own: the controller's terminal may be mid-line ("test_x.py ..").
            data = ("\n" + prefix + line + "\n").encode("utf-8", "replace")
            # Straight to the file descriptor: sys.stderr may be a capture's replacement.
            uncaptured(lambda: _write_all(2, data))

        return to_stderr

    reporter = config.pluginmanager.get_plugin("terminalreporter")

    def to_terminal(line: str) -> None:
        if reporter is None:
            return

        def write() -> None:
            reporter.write_line(line)
            reporter.flush()

        uncaptured(write)

    return to_terminal


def _write_all(fd: int, data: bytes) -> None:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:  # a closed standard error must not fail the test
        pass
