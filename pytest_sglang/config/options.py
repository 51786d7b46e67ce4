"""The option catalogue: every setting's flag, ini key, environment variable, help and default.

A setting changed from run to run is a flag ``--sglang-NAME`` (taking a ``metavar``, or a
switch); one set once per project is not (neither). Every setting is also
the ini key ``sglang_NAME`` and the environment variable ``PYTEST_SGLANG_NAME`` (never
``SGLANG_*``, which SGLang itself reads).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

__all__ = [
    "DEFAULT_FIRST_TOKEN_TIMEOUT",
    "DEFAULT_LOAD_WORKERS",
    "DEFAULT_MAX_CONSECUTIVE_FAILURES",
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SERVER_NAME",
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_STORAGE",
    "INCONCLUSIVE_CHOICES",
    "LAUNCHERS",
    "OPTIONS",
    "OptionSpec",
    "anything_set",
    "pyproject_of",
]

#: The server a test gets when it names none and several are configured.
DEFAULT_SERVER_NAME = "default"
#: Long enough for a large model to load weights and capture CUDA graphs.
DEFAULT_READY_TIMEOUT = 600.0
#: A request of a measurement may take this long in all (a long queue at high concurrency).
DEFAULT_REQUEST_TIMEOUT = 600.0
#: A stream may go this long without a new token once its first token arrived.
DEFAULT_STALL_TIMEOUT = 60.0
#: A streamed request may wait this long for its first token while the whole run receives
#: no token (a frozen server); measured against SGLang's queueing by
#: ``benchmarks/queue_wait.py`` (see ``LoadGenerator``).
DEFAULT_FIRST_TOKEN_TIMEOUT = 90.0
#: Requests in a row that ended without an answer before a run gives up on the server.
DEFAULT_MAX_CONSECUTIVE_FAILURES = 8
#: Load-generator workers per run (processes, or Ray actors).
DEFAULT_LOAD_WORKERS = 1
#: Launchers ``--sglang-launcher`` accepts; the first is the default.
LAUNCHERS = ("sglang", "emulator")
#: What ``--sglang-inconclusive`` accepts; the first is the default.
INCONCLUSIVE_CHOICES = ("fail", "skip", "warn")
#: pytest-benchmark's default storage, so that ``pytest-benchmark list`` finds ours too.
DEFAULT_STORAGE = "file://./.benchmarks"


@dataclass(frozen=True)
class OptionSpec:
    """One setting: its CLI flag (if any), ini key, environment variable and help text."""

    name: str
    help: str
    #: What the flag takes, e.g. ``PATH``; None: a switch (``flag``) or a per-project setting.
    metavar: str | None = None
    repeatable: bool = False
    flag: bool = False
    #: The value of the flag given alone (``--sglang-compare`` means ``latest``).
    const: str | None = None
    #: What kind of value it takes: the ``$defs`` entry of ``schemas/config.schema.json`` its
    #: values must match, if there is one, and how ``config/settings.py`` converts them.
    kind: str | None = None

    @property
    def cli(self) -> str | None:
        """The command-line flag, e.g. ``--sglang-url``; None for a per-project setting.

        Per project: neither a ``metavar`` nor a ``flag``; an ini key and environment variable.
        """
        return None if self.metavar is None and not self.flag else f"--sglang-{self.name}"

    @property
    def dest(self) -> str:
        """The ``config.option`` attribute and the ini key, e.g. ``sglang_url``."""
        return "sglang_" + self.name.replace("-", "_")

    ini = dest

    @property
    def env(self) -> str:
        """The environment variable, e.g. ``PYTEST_SGLANG_URL``."""
        return "PYTEST_" + self.dest.upper()

    @property
    def label(self) -> str:
        """How messages name the setting: its flag, else its ini key."""
        return self.cli or self.ini


def _choice(name: str, text: str, choices: tuple[str, ...]) -> OptionSpec:
    """Return a command-line option of ``choices`` (the first: its default); its kind: ``name``."""
    shown = "{" + ",".join(choices) + "}"
    return OptionSpec(name, f"{text}. Default: {choices[0]}", shown, kind=name)


def _timeout(name: str, text: str, default: float, metavar: str | None = None) -> OptionSpec:
    """Return a timeout: a flag taking ``metavar`` if given, else a per-project setting."""
    described = f"{text}. Default: {default:g}s"
    return OptionSpec(name, described, metavar, kind="duration")


# Help texts follow xdist's rule: capitalised, no final period; one line of `pytest --help`.
URL = OptionSpec(
    "url", "Attach to a running server (repeatable)", "[NAME=][openai+]URL", repeatable=True
)
HEADER = OptionSpec(
    "header", "HTTP header for a server (repeatable; secret)", "[NAME:]H=V", repeatable=True
)
API_KEY = OptionSpec("api-key", "The servers' API key (never printed)", "KEY", kind="secret")
EXPECT = OptionSpec(
    "expect", "Identity the readiness gate checks (repeatable)", "[NAME:]K=V", repeatable=True
)
REQUIRE = OptionSpec(
    "require", "Fail, not skip, tests without server or GPU", flag=True, kind="boolean"
)
READY_TIMEOUT = _timeout("ready-timeout", "Readiness deadline", DEFAULT_READY_TIMEOUT, "SECONDS")
PROFILES = OptionSpec("profiles", "TOML file of [profiles.NAME] tables", "PATH")
LAUNCHER = _choice("launcher", "What launches a profile", LAUNCHERS)
INCONCLUSIVE = _choice("inconclusive", "What an inconclusive verdict does", INCONCLUSIVE_CHOICES)
SHARD = OptionSpec("shard", "Run shard K of N (whole launch groups)", "K/N", kind="shard")
REPORT = OptionSpec("report", "Write the results as JSON", "PATH")
MARKDOWN = OptionSpec("markdown", "Append the results as Markdown", "PATH")
# Stored baselines (docs/baselines.md says why these are not pytest-benchmark's flags).
SAVE = OptionSpec("save", "Save the measurements; alone or auto: commit_time", "NAME", const="auto")
COMPARE = OptionSpec("compare", "Judge against stored measurements", "REF", const="latest")
COMPARE_FAIL = OptionSpec(
    "compare-fail", "Fail on a regression beyond PCT (repeatable)", "METRIC:PCT", repeatable=True
)

# Set once per project: ini keys and environment variables only.
EMULATOR_ARGS = OptionSpec(
    "emulator-args", "Extra emulator arguments (launcher emulator)", kind="args"
)
GPU_HOST = OptionSpec("gpu-host", "Read GPU state over ssh on [USER@]HOST", kind="host")
GPU_FAKE = OptionSpec("gpu-fake", "Read GPU state from a fake-GPU directory")
REQUEST_TIMEOUT = _timeout(
    "request-timeout", "A measured request's deadline", DEFAULT_REQUEST_TIMEOUT
)
STALL_TIMEOUT = _timeout("stall-timeout", "Longest silence of a stream", DEFAULT_STALL_TIMEOUT)
FIRST_TOKEN_TIMEOUT = _timeout(
    "first-token-timeout", "First-token wait on a frozen server", DEFAULT_FIRST_TOKEN_TIMEOUT
)
MAX_CONSECUTIVE_FAILURES = OptionSpec(
    "max-consecutive-failures",
    f"Unanswered requests that end a run. Default: {DEFAULT_MAX_CONSECUTIVE_FAILURES}",
    kind="count",
)
LOAD_WORKERS = OptionSpec(
    "load-workers",
    f"Load-generator processes. Default: {DEFAULT_LOAD_WORKERS}",
    kind="workers",
)
RAY_ADDRESS = OptionSpec("ray-address", "Ray cluster for the load workers", kind="ray-address")
STORAGE = OptionSpec("storage", f"Baselines' storage. Default: {DEFAULT_STORAGE}")

#: Every setting, in the order of ``pytest --help``: the specs above, as defined.
OPTIONS: tuple[OptionSpec, ...] = tuple(
    v for v in dict(globals()).values() if isinstance(v, OptionSpec)
)


def pyproject_of(config: pytest.Config) -> tuple[Path, bool]:
    """Return the session's ``pyproject.toml`` and whether it mentions pytest-sglang.

    Read as text, not parsed: only a file that mentions us can hold our profiles.
    """
    path = config.inipath
    if path is None or path.name != "pyproject.toml":
        path = config.rootpath / "pyproject.toml"
    try:
        return path, "pytest-sglang" in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return path, False


def anything_set(config: pytest.Config) -> bool:
    """Whether a flag, ini key, environment variable or pyproject.toml profile of ours is set."""
    if any(name.startswith("PYTEST_SGLANG_") for name in os.environ):
        return True
    for spec in OPTIONS:
        if config.getini(spec.ini) or (spec.cli and config.getoption(spec.dest) not in (None, [])):
            return True
    return pyproject_of(config)[1]
