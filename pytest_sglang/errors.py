"""Exception types raised by pytest-sglang, all under :class:`SGLangError`.

The verdicts' errors are also :class:`AssertionError`, so pytest reports them as failed
assertions. Bad option values are :class:`pytest.UsageError` instead (pytest stops at once).
"""

from __future__ import annotations

from typing import Self


class SGLangError(Exception):
    """Base class of the errors raised by pytest-sglang."""

    def with_message(self, message: str) -> Self:
        """Return a copy of this error (type and attributes kept) with ``message`` as its message.

        ``add_note`` would not do: the fixtures report ``str(error)``, which leaves notes out.
        """
        # Not copy.copy: it would call __init__ with the message alone.
        again = type(self).__new__(type(self))
        again.__dict__.update(self.__dict__)
        again.args = (message,)
        return again

    def extended(self, detail: str) -> Self:
        """Return a copy of this error whose message ends with ``detail``."""
        return self.with_message(f"{self}{detail}")


class ServerNotReady(SGLangError):
    """The readiness gate did not pass: the message names the phase and the last response."""

    def __init__(self, message: str, *, phase: str) -> None:
        super().__init__(message)
        #: The phase that failed: ``connect``, ``health``, ``models``, ``identity``,
        #: ``server_info``; in launch mode also ``launch`` (the process could not start) and
        #: ``freshness`` (the port is served by a process we did not start).
        self.phase = phase


class SchemaMismatch(ServerNotReady):
    """A server response does not match the JSON Schema shipped with the plugin."""

    def __init__(self, message: str, *, phase: str, json_path: str) -> None:
        super().__init__(message, phase=phase)
        #: Where in the response the first violation is, e.g. ``$.data[0].max_model_len``.
        self.json_path = json_path


class IdentityMismatch(ServerNotReady):
    """The server is up but serves another model or configuration than expected."""


class ServerUnavailable(SGLangError):
    """No server is configured (or none by the requested name)."""


class ServerExited(ServerNotReady):
    """A launched server's process exited before (or while) passing the readiness gate."""

    def __init__(self, message: str, *, phase: str, exit_code: int | None) -> None:
        super().__init__(message, phase=phase)
        #: The process's exit code (negative: killed by that signal).
        self.exit_code = exit_code


class ServerDied(ServerExited):
    """A server that had passed the readiness gate is gone.

    It exited or was killed, or (an attached one) no longer accepts connections. Raised by
    the measurement it broke and, at once, by every later test that needs it. ``phase`` is
    ``serving``; ``exit_code`` is known for launched servers only.
    """


class MeasurementFailed(SGLangError):
    """Requests of a measurement failed beyond the error budget the call allowed.

    ``sglang_bench(..., allow_errors=FRACTION)`` sets the budget (default 0: any failed
    request fails the test); the message counts the failures by kind and quotes the server.
    """


class GpuUnavailable(SGLangError):
    """GPU state cannot be read here (no NVML package, no driver, ssh failure...)."""


class GpuNotClean(SGLangError):
    """Pre-flight: a GPU the launch needs is held by other processes or memory."""


class GpuMemoryNotReleased(SGLangError):
    """Post-flight: GPU memory did not return to the pre-launch baseline in time."""


class ServerLeftovers(SGLangError):
    """Teardown found and killed processes of ours that outlived the server."""


class ComparisonRefused(SGLangError):
    """Two measurements cannot be compared: different workloads, invalid runs, too few runs."""


class SGLangWarning(UserWarning):
    """Something the user should know that does not fail a test (an unwritable output)."""


class _VerdictFailure(SGLangError, AssertionError):
    """A verdict that did not pass: the message says why, ``verdict`` holds the evidence."""

    def __init__(self, message: str, verdict: object = None) -> None:
        super().__init__(message)
        #: The :class:`~pytest_sglang.verdicts.assertions.Verdict` with all the evidence.
        self.verdict = verdict


class PerformanceAssertionError(_VerdictFailure):
    """A performance verdict failed; the message is the evidence table."""


class Inconclusive(_VerdictFailure):
    """The runs cannot decide the claim either way; the message says what would."""
