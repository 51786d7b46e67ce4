"""Settings: the plugin's options, their help texts, and their resolution.

Every option exists three times with one help text: ``--sglang-NAME`` on the command line,
``sglang_NAME`` in the ini file and ``PYTEST_SGLANG_NAME`` in the environment (never
``SGLANG_*``, which SGLang itself reads). Precedence is marker > CLI > env > ini > default;
markers are applied per test by the fixtures, everything else is resolved here once, into a
frozen :class:`Settings` stored in ``config.stash``. Each value remembers where it came from,
so an error can say which source to fix. This module is pure: no network, no heavy imports.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar
from urllib.parse import urlsplit

import pytest

from pytest_sglang.loadgen.limits import DEFAULT_REQUEST_TIMEOUT, DEFAULT_STALL_TIMEOUT

if TYPE_CHECKING:
    from pytest_sglang.profiles import Profile

__all__ = [
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_SERVER_NAME",
    "LAUNCHERS",
    "OPTIONS",
    "SETTINGS_KEY",
    "Expectation",
    "OptionSpec",
    "ServerUrl",
    "Settings",
    "Sourced",
    "is_valid_server_name",
    "parse_expectation",
    "resolve_settings",
]

T = TypeVar("T")

DEFAULT_SERVER_NAME = "default"
#: Long enough for a large model to load weights and capture CUDA graphs.
DEFAULT_READY_TIMEOUT = 600.0

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_DURATION_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ms|s|m|h)?\s*$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True)
class OptionSpec:
    """One plugin option: its CLI flag, ini key, environment variable and help text."""

    name: str
    help: str
    metavar: str | None = None
    repeatable: bool = False
    flag: bool = False

    @property
    def cli(self) -> str:
        """The command-line flag, e.g. ``--sglang-url``."""
        return f"--sglang-{self.name}"

    @property
    def dest(self) -> str:
        """The ``config.option`` attribute the flag is stored in."""
        return "sglang_" + self.name.replace("-", "_")

    @property
    def ini(self) -> str:
        """The ini key, e.g. ``sglang_url``."""
        return self.dest

    @property
    def env(self) -> str:
        """The environment variable, e.g. ``PYTEST_SGLANG_URL``."""
        return "PYTEST_" + self.dest.upper()


# Help texts follow xdist's rule: capitalised, no final period, and are shared by the CLI
# flag and the ini key so the two never drift apart.
URL = OptionSpec(
    "url",
    "Attach to a running SGLang server: URL or NAME=URL (repeatable; NAME is what "
    "@pytest.mark.sglang_profile(NAME) selects, 'default' when omitted). "
    "Env PYTEST_SGLANG_URL: whitespace-separated list",
    metavar="[NAME=]URL",
    repeatable=True,
)
READY_TIMEOUT = OptionSpec(
    "ready-timeout",
    "Seconds to wait for a server to pass the readiness gate (suffixes ms, s, m, h "
    f"accepted). Default: {DEFAULT_READY_TIMEOUT:g}s",
    metavar="SECONDS",
)
API_KEY = OptionSpec(
    "api-key",
    "API key the server was started with (--api-key); sent as 'Authorization: Bearer KEY' "
    "and never printed",
    metavar="KEY",
)
REQUIRE = OptionSpec(
    "require",
    "Fail, instead of skip, tests whose server or GPU is not available "
    "(ini/env: true/false). Default: false",
    flag=True,
)
EXPECT = OptionSpec(
    "expect",
    "Identity the readiness gate checks: [NAME:]KEY=VALUE (repeatable). KEY is model_id, "
    "max_model_len or any /server_info key such as tp_size or speculative_algorithm; VALUE "
    "is JSON (8, true, null) or a plain string. Env PYTEST_SGLANG_EXPECT: whitespace-separated",
    metavar="[NAME:]KEY=VALUE",
    repeatable=True,
)

PROFILES = OptionSpec(
    "profiles",
    "TOML file of server profiles ([profiles.NAME] tables with model-path, tp, args, env, "
    "expect, extends, command); profiles may also live in pyproject.toml under "
    "[tool.pytest-sglang.profiles.NAME]",
    metavar="PATH",
)
LAUNCHER = OptionSpec(
    "launcher",
    "What launches a profile's server: 'sglang' (python -m sglang.launch_server, or the "
    "profile's command) or 'emulator' (python -m pytest_sglang.emulator, same arguments; "
    "no GPU needed). Default: sglang",
    metavar="{sglang,emulator}",
)
EMULATOR_ARGS = OptionSpec(
    "emulator-args",
    "Extra arguments for the emulator only, appended to every profile's command line under "
    "--sglang-launcher=emulator (e.g. '--emulator-speedup 50 --emulator-accept-length 1.2'); "
    "profiles keep real SGLang flags only",
    metavar="ARGS",
)
GPU_HOST = OptionSpec(
    "gpu-host",
    "Read GPU state with nvidia-smi over ssh on this host (user@host, BatchMode) instead of "
    "NVML on this machine; use it when the server runs elsewhere",
    metavar="[USER@]HOST",
)
GPU_FAKE = OptionSpec(
    "gpu-fake",
    "Read GPU state from a fake-GPU directory (gpus.json plus holder files the emulator "
    "writes) instead of NVML: for dry runs and the plugin's own tests",
    metavar="DIR",
)

REQUEST_TIMEOUT = OptionSpec(
    "request-timeout",
    "Seconds one request of a measurement (sglang_bench) may take in all before it is "
    "recorded as a failed request (suffixes ms, s, m, h accepted). "
    f"Default: {DEFAULT_REQUEST_TIMEOUT:g}s",
    metavar="SECONDS",
)
STALL_TIMEOUT = OptionSpec(
    "stall-timeout",
    "Seconds a streamed request of a measurement may go without a new token, once its first "
    "token arrived, before it is recorded as failed (stalled); the wait for the first token "
    "may be a queue and counts against --sglang-request-timeout only. "
    f"Default: {DEFAULT_STALL_TIMEOUT:g}s",
    metavar="SECONDS",
)

REPORT = OptionSpec(
    "report",
    "Write the results (environment, servers, measurements with every run, verdicts with "
    "their evidence) as JSON to PATH; the format is the versioned JSON Schema "
    "pytest_sglang/schemas/report.schema.json",
    metavar="PATH",
)

MARKDOWN = OptionSpec(
    "markdown",
    "Append the results (tables and verdicts) as Markdown to PATH at the end of the run, "
    "e.g. --sglang-markdown=$GITHUB_STEP_SUMMARY for a GitHub Actions job summary",
    metavar="PATH",
)

OPTIONS: tuple[OptionSpec, ...] = (
    URL,
    READY_TIMEOUT,
    API_KEY,
    REQUIRE,
    EXPECT,
    PROFILES,
    LAUNCHER,
    EMULATOR_ARGS,
    GPU_HOST,
    GPU_FAKE,
    REQUEST_TIMEOUT,
    STALL_TIMEOUT,
    REPORT,
    MARKDOWN,
)
#: Launchers ``--sglang-launcher`` accepts.
LAUNCHERS = ("sglang", "emulator")


@dataclass(frozen=True)
class Sourced(Generic[T]):
    """A resolved setting and a human description of where it came from."""

    value: T
    source: str


@dataclass(frozen=True)
class ServerUrl:
    """An attached server: its name, base URL (no trailing slash) and the value's source."""

    name: str
    url: str
    source: str


@dataclass(frozen=True)
class Expectation:
    """One identity expectation: ``key`` must equal ``value`` on server ``server`` (or all)."""

    key: str
    value: object
    source: str
    server: str | None = None

    def describe(self) -> str:
        """Return the expectation as the user wrote it, e.g. ``eagle3:tp_size=8``."""
        prefix = f"{self.server}:" if self.server else ""
        return f"{prefix}{self.key}={json.dumps(self.value)}"


@dataclass(frozen=True)
class Settings:
    """The plugin's effective settings, validated, with the source of every value."""

    servers: tuple[ServerUrl, ...]
    ready_timeout: Sourced[float]
    api_key: Sourced[str | None]
    require: Sourced[bool]
    expectations: tuple[Expectation, ...]
    launcher: Sourced[str] = Sourced("sglang", "default")
    emulator_args: Sourced[tuple[str, ...]] = Sourced((), "default")
    profiles: Mapping[str, Profile] = field(default_factory=dict)
    gpu_host: Sourced[str | None] = Sourced(None, "default")
    gpu_fake: Sourced[Path | None] = Sourced(None, "default")
    report: Sourced[Path | None] = Sourced(None, "default")
    markdown: Sourced[Path | None] = Sourced(None, "default")
    request_timeout: Sourced[float] = Sourced(DEFAULT_REQUEST_TIMEOUT, "default")
    stall_timeout: Sourced[float] = Sourced(DEFAULT_STALL_TIMEOUT, "default")

    def profile(self, name: str) -> Profile | None:
        """Return the profile called ``name``, if any."""
        return self.profiles.get(name)

    def server(self, name: str) -> ServerUrl | None:
        """Return the attached server called ``name``, if any."""
        return next((s for s in self.servers if s.name == name), None)

    def expectations_for(self, name: str) -> tuple[Expectation, ...]:
        """Return the expectations that apply to server ``name``."""
        own = tuple(e for e in self.expectations if e.server in (None, name))
        profile = self.profiles.get(name)
        if profile is None:
            return own
        # A profile's expect table applies to its server, launched or attached; the command
        # line (or env, ini) wins for the same key.
        keys = {e.key for e in own}
        return own + tuple(e for e in profile.expectations() if e.key not in keys)

    def header_lines(self) -> list[str]:
        """Describe the effective settings for ``pytest_report_header`` (API key redacted)."""
        servers = ", ".join(f"{s.name}={s.url}" for s in self.servers) or "none"
        key = "set, redacted" if self.api_key.value else "not set"
        lines = [
            f"sglang: servers: {servers}"
            + (f" (from {self.servers[0].source})" if self.servers else ""),
            f"sglang: ready-timeout: {self.ready_timeout.value:g}s "
            f"(from {self.ready_timeout.source}); api-key: {key}"
            + (f" (from {self.api_key.source})" if self.api_key.value else "")
            + f"; require: {'yes' if self.require.value else 'no'}",
        ]
        if self.profiles:
            lines.append(
                f"sglang: launcher: {self.launcher.value} (from {self.launcher.source}); "
                f"profiles: {', '.join(self.profiles)}"
                + (
                    f"; emulator args: {' '.join(self.emulator_args.value)}"
                    if self.emulator_args.value and self.launcher.value == "emulator"
                    else ""
                )
            )
        # Shown only when set: the defaults would lengthen every header.
        if (self.request_timeout.source, self.stall_timeout.source) != ("default", "default"):
            lines.append(
                f"sglang: request-timeout: {self.request_timeout.value:g}s "
                f"(from {self.request_timeout.source}); stall-timeout: "
                f"{self.stall_timeout.value:g}s (from {self.stall_timeout.source})"
            )
        if self.expectations:
            lines.append("sglang: expect: " + ", ".join(e.describe() for e in self.expectations))
        return lines


@dataclass(frozen=True)
class _Raw:
    """The raw strings found in the highest-precedence source, before parsing."""

    value: list[str]
    source: str
    #: What a relative path in the value is relative to: the directory pytest was invoked
    #: from for the command line and environment, the ini file's directory for the ini file.
    base: Path


def _usage_error(spec: OptionSpec, source: str, problem: str, fix: str) -> pytest.UsageError:
    # One grammar for every configuration error: what is wrong, where it came from, how to fix.
    return pytest.UsageError(f"{spec.cli}: {problem} (from {source}); {fix}")


def _lookup(
    spec: OptionSpec,
    config: pytest.Config,
    environ: Mapping[str, str],
) -> _Raw | None:
    """Return the highest-precedence raw value of ``spec`` as a list of strings, or None."""
    invoked = Path(config.invocation_params.dir)
    cli = config.getoption(spec.dest, default=None)
    if cli is not None and cli != []:
        if spec.flag:
            return _Raw(["true" if cli else "false"], f"{spec.cli} on the command line", invoked)
        values = cli if isinstance(cli, list) else [cli]
        return _Raw([str(v) for v in values], f"{spec.cli} on the command line", invoked)
    env = environ.get(spec.env)
    if env is not None and env.strip():
        parts = shlex.split(env) if spec.repeatable else [env.strip()]
        return _Raw(parts, f"environment variable {spec.env}", invoked)
    ini = config.getini(spec.ini)
    ini_values = [str(v) for v in ini] if isinstance(ini, list) else [str(ini)]
    ini_values = [v.strip() for v in ini_values if v.strip()]
    if ini_values:
        where = f" in {config.inipath}" if config.inipath else ""
        base = config.inipath.parent if config.inipath else config.rootpath
        return _Raw(ini_values, f"ini option {spec.ini}{where}", base)
    return None


def is_valid_server_name(name: str) -> bool:
    """Return whether ``name`` can name a server (letters, digits, ``_``, ``.``, ``-``)."""
    return bool(_NAME_RE.match(name))


def parse_duration(spec: OptionSpec, raw: str, source: str) -> float:
    """Parse a positive duration such as ``90``, ``1.5s``, ``500ms`` or ``10m`` into seconds."""
    match = _DURATION_RE.match(raw)
    if not match:
        raise _usage_error(
            spec,
            source,
            f"{raw!r} is not a duration",
            "give seconds as a number, optionally with a unit: 90, 90s, 500ms, 10m, 1h",
        )
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise _usage_error(
            spec,
            source,
            f"{raw!r} is not a positive duration",
            "give a timeout greater than zero, e.g. 600",
        )
    return seconds


def parse_bool(spec: OptionSpec, raw: str, source: str) -> bool:
    """Parse true/false, yes/no, on/off or 1/0 (any case)."""
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise _usage_error(
        spec, source, f"{raw!r} is not a boolean", "use one of true, false, yes, no, on, off, 1, 0"
    )


def parse_server_url(spec: OptionSpec, raw: str, source: str) -> ServerUrl:
    """Parse ``URL`` or ``NAME=URL`` into a :class:`ServerUrl`, validating both parts."""
    name, sep, url = raw.partition("=")
    # A bare URL may itself contain '=' in a query string; only a NAME= prefix without
    # "://" before the '=' counts as a name.
    if not sep or "://" in name:
        name, url = DEFAULT_SERVER_NAME, raw
    name, url = name.strip(), url.strip()
    if not _NAME_RE.match(name):
        raise _usage_error(
            spec,
            source,
            f"server name {name!r} in {raw!r} is not valid",
            "use letters, digits, '_', '.' or '-', e.g. eagle3=http://gpu-host:30000",
        )
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"}:
        example = f"http://{url}" if "://" not in url else "http://127.0.0.1:30000"
        raise _usage_error(
            spec,
            source,
            f"URL {url!r} has no http:// or https:// scheme"
            if "://" not in url
            else f"URL {url!r} has scheme {parts.scheme!r}, not http or https",
            f"write it with a scheme, e.g. {example}",
        )
    if not parts.hostname:
        raise _usage_error(
            spec,
            source,
            f"URL {url!r} has no host",
            "write it as http://HOST:PORT, e.g. http://127.0.0.1:30000",
        )
    try:
        parts.port  # noqa: B018 - urlsplit validates the port lazily, on access
    except ValueError:
        raise _usage_error(
            spec,
            source,
            f"URL {url!r} has an invalid port",
            "give a port between 1 and 65535, e.g. http://127.0.0.1:30000",
        ) from None
    if parts.query or parts.fragment:
        raise _usage_error(
            spec,
            source,
            f"URL {url!r} has a query or fragment",
            "give the server's base URL only, e.g. http://127.0.0.1:30000",
        )
    return ServerUrl(name=name, url=url.rstrip("/"), source=source)


def parse_expectation(raw: str, source: str, spec: OptionSpec = EXPECT) -> Expectation:
    """Parse ``[NAME:]KEY=VALUE``; VALUE is decoded as JSON when it is valid JSON."""
    head, sep, value_text = raw.partition("=")
    if not sep or not head.strip():
        raise _usage_error(
            spec,
            source,
            f"{raw!r} is not KEY=VALUE",
            "write e.g. max_model_len=131072, tp_size=8 or eagle3:speculative_algorithm=EAGLE3",
        )
    server, colon, key = head.rpartition(":")
    server_name = server.strip() if colon else None
    key = key.strip()
    if server_name is not None and not _NAME_RE.match(server_name):
        raise _usage_error(
            spec,
            source,
            f"server name {server_name!r} in {raw!r} is not valid",
            "use letters, digits, '_', '.' or '-' before the ':'",
        )
    if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
        raise _usage_error(
            spec,
            source,
            f"key {key!r} in {raw!r} is not valid",
            "use model_id, max_model_len or a /server_info key such as tp_size",
        )
    try:
        value: object = json.loads(value_text)
    except ValueError:
        value = value_text.strip()
    return Expectation(key=key, value=value, source=source, server=server_name)


def _lookup_one(spec: OptionSpec, config: pytest.Config, environ: Mapping[str, str]) -> _Raw | None:
    """Return the raw value of a single-valued option, or None when it is not set."""
    raw = _lookup(spec, config, environ)
    if raw is not None and len(raw.value) != 1:
        raise _usage_error(
            spec, raw.source, f"expected one value, got {raw.value!r}", "give the option once"
        )
    return raw


def _resolve_one(
    spec: OptionSpec,
    config: pytest.Config,
    environ: Mapping[str, str],
    parse: Callable[[OptionSpec, str, str], T],
    default: T,
) -> Sourced[T]:
    raw = _lookup_one(spec, config, environ)
    if raw is None:
        return Sourced(default, "default")
    return Sourced(parse(spec, raw.value[0], raw.source), raw.source)


def _resolve_servers(config: pytest.Config, environ: Mapping[str, str]) -> tuple[ServerUrl, ...]:
    raw = _lookup(URL, config, environ)
    if raw is None:
        return ()
    servers: list[ServerUrl] = []
    for item in raw.value:
        server = parse_server_url(URL, item, raw.source)
        clash = next((s for s in servers if s.name == server.name), None)
        if clash is not None:
            raise _usage_error(
                URL,
                raw.source,
                f"server name {server.name!r} is given twice ({clash.url} and {server.url})",
                "give each server its own name: NAME=URL, e.g. baseline=http://h:30000 "
                "eagle3=http://h:30001",
            )
        servers.append(server)
    return tuple(servers)


def _resolve_expectations(
    config: pytest.Config, environ: Mapping[str, str], servers: Sequence[ServerUrl]
) -> tuple[Expectation, ...]:
    raw = _lookup(EXPECT, config, environ)
    if raw is None:
        return ()
    expectations = tuple(parse_expectation(item, raw.source) for item in raw.value)
    names = {s.name for s in servers}
    for expectation in expectations:
        if expectation.server is not None and servers and expectation.server not in names:
            raise _usage_error(
                EXPECT,
                raw.source,
                f"{expectation.describe()!r} names server {expectation.server!r}, "
                f"which is not among the attached servers ({', '.join(sorted(names))})",
                "use one of those names, or drop the NAME: prefix to check every server",
            )
    return expectations


def parse_args(spec: OptionSpec, raw: str, source: str) -> tuple[str, ...]:
    """Split a command-line fragment the way a shell would."""
    try:
        return tuple(shlex.split(raw))
    except ValueError as exc:
        raise _usage_error(
            spec, source, f"{raw!r} cannot be split: {exc}", "quote arguments the way a shell would"
        ) from None


def parse_launcher(spec: OptionSpec, raw: str, source: str) -> str:
    """Parse a launcher name."""
    if raw not in LAUNCHERS:
        raise _usage_error(
            spec, source, f"{raw!r} is not a launcher", f"use one of {', '.join(LAUNCHERS)}"
        )
    return raw


def _resolve_path(
    spec: OptionSpec,
    config: pytest.Config,
    environ: Mapping[str, str],
    problem: Callable[[Path], str | None],
    fix: str,
) -> Sourced[Path | None]:
    """Resolve a path option; a relative path is relative to where its value was written.

    ``problem`` returns what is wrong with the resolved path, or None when it will do.
    """
    raw = _lookup_one(spec, config, environ)
    if raw is None:
        return Sourced(None, "default")
    path = Path(raw.base, raw.value[0]).resolve()
    wrong = problem(path)
    if wrong is not None:
        where = "" if Path(raw.value[0]).is_absolute() else f" (relative to {raw.base})"
        raise _usage_error(spec, raw.source, f"{raw.value[0]!r}{where} {wrong}", fix)
    return Sourced(path, raw.source)


def _not_a_file(path: Path) -> str | None:
    return None if path.is_file() else "is not a file"


def _not_a_dir(path: Path) -> str | None:
    return None if path.is_dir() else "is not a directory"


def _a_dir(path: Path) -> str | None:
    return "is a directory" if path.is_dir() else None


def _resolve_profiles(config: pytest.Config, environ: Mapping[str, str]) -> dict[str, Profile]:
    toml_fix = "give the path of a TOML file with [profiles.NAME] tables"
    profiles_file = _resolve_path(PROFILES, config, environ, _not_a_file, toml_fix).value
    inipath = config.inipath
    pyproject = (
        inipath
        if inipath and inipath.name == "pyproject.toml"
        else (config.rootpath / "pyproject.toml")
    )
    if profiles_file is None and not _mentions_profiles(pyproject):
        return {}
    # Imported here: tomllib and the profile code cost milliseconds in every pytest run.
    from pytest_sglang.profiles import load_profiles

    return load_profiles(pyproject, profiles_file)


def _mentions_profiles(pyproject: Path) -> bool:
    try:
        return "pytest-sglang" in pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def resolve_settings(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Settings:
    """Resolve every option (CLI > env > ini > default) and validate it.

    :raises pytest.UsageError: naming the option, the source of the bad value and the fix.
    """
    env = os.environ if environ is None else environ
    servers = _resolve_servers(config, env)
    api_key = _lookup(API_KEY, config, env)
    gpu_host = _lookup(GPU_HOST, config, env)
    if gpu_host is not None and gpu_host.value[0].startswith("-"):
        raise _usage_error(
            GPU_HOST,
            gpu_host.source,
            f"{gpu_host.value[0]!r} is not a host",
            "give [USER@]HOST, e.g. ubuntu@gpu-box",
        )
    return Settings(
        launcher=_resolve_one(LAUNCHER, config, env, parse_launcher, "sglang"),
        emulator_args=_resolve_one(EMULATOR_ARGS, config, env, parse_args, ()),
        profiles=_resolve_profiles(config, env),
        gpu_host=Sourced(gpu_host.value[0], gpu_host.source)
        if gpu_host
        else Sourced(None, "default"),
        gpu_fake=_resolve_path(GPU_FAKE, config, env, _not_a_dir, "give an existing directory"),
        report=_resolve_path(
            REPORT, config, env, _a_dir, "give a file path, e.g. sglang-report.json"
        ),
        markdown=_resolve_path(
            MARKDOWN, config, env, _a_dir, "give a file path, e.g. $GITHUB_STEP_SUMMARY"
        ),
        servers=servers,
        ready_timeout=_resolve_one(
            READY_TIMEOUT, config, env, parse_duration, DEFAULT_READY_TIMEOUT
        ),
        api_key=Sourced(api_key.value[0], api_key.source) if api_key else Sourced(None, "default"),
        require=_resolve_one(REQUIRE, config, env, parse_bool, False),
        request_timeout=_resolve_one(
            REQUEST_TIMEOUT, config, env, parse_duration, DEFAULT_REQUEST_TIMEOUT
        ),
        stall_timeout=_resolve_one(
            STALL_TIMEOUT, config, env, parse_duration, DEFAULT_STALL_TIMEOUT
        ),
        expectations=_resolve_expectations(config, env, servers),
    )


#: Where ``pytest_configure`` stores the resolved :class:`Settings`.
SETTINGS_KEY = pytest.StashKey[Settings]()
