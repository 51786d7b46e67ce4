"""Settings: every option resolved once, into a frozen :class:`Settings` in ``config.stash``.

Precedence (docs/guide.md, "Options"): marker > flag > ``-o`` > environment > ini > default;
markers are applied per test by the fixtures. Each value remembers its source, so an error
can say which to fix. Pure: no network, no heavy imports.
"""

from __future__ import annotations

import functools
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, TypeVar

import pytest

from pytest_sglang.config.defaults import (
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_LOAD_WORKERS,
    DEFAULT_MAX_CONSECUTIVE_FAILURES,
    DEFAULT_READY_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SERVER_NAME,
    DEFAULT_STALL_TIMEOUT,
    INCONCLUSIVE_CHOICES,
    LAUNCHERS,
)
from pytest_sglang.config.options import (
    API_KEY,
    EMULATOR_ARGS,
    EXPECT,
    FIRST_TOKEN_TIMEOUT,
    GPU_FAKE,
    GPU_HOST,
    HEADER,
    INCONCLUSIVE,
    LAUNCHER,
    LOAD_WORKERS,
    MARKDOWN,
    MAX_CONSECUTIVE_FAILURES,
    OPTIONS,
    PROFILES,
    RAY_ADDRESS,
    READY_TIMEOUT,
    REPORT,
    REQUEST_TIMEOUT,
    REQUIRE,
    SHARD,
    STALL_TIMEOUT,
    URL,
    OptionSpec,
)
from pytest_sglang.config.parsing import (
    parse_args,
    parse_bool,
    parse_count,
    parse_duration,
    parse_expectation,
    parse_header,
    parse_inconclusive,
    parse_launcher,
    parse_ray_address,
    parse_server_url,
    parse_workers,
    usage_error,
)
from pytest_sglang.config.paths import OUTPUT_FIX, output_path, output_problem
from pytest_sglang.config.redaction import Redactor, is_secret_name, secret_flag_values
from pytest_sglang.config.schema import check_settings
from pytest_sglang.config.shards import Shard, parse_shard
from pytest_sglang.config.targets import ServerTarget, build_targets
from pytest_sglang.config.values import Expectation, Header, ServerUrl, Sourced

if TYPE_CHECKING:
    from pytest_sglang.config.profiles import Profile

__all__ = ["SETTINGS_KEY", "Raw", "Settings", "lookup", "resolve_settings"]

T = TypeVar("T")


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
    first_token_timeout: Sourced[float] = Sourced(DEFAULT_FIRST_TOKEN_TIMEOUT, "default")
    #: 0: a run never stops early for unanswered requests.
    max_consecutive_failures: Sourced[int] = Sourced(DEFAULT_MAX_CONSECUTIVE_FAILURES, "default")
    #: Load-generator workers per run (``sglang_load_workers``): processes, or Ray actors.
    load_workers: Sourced[int] = Sourced(DEFAULT_LOAD_WORKERS, "default")
    #: The Ray cluster the workers run on (``sglang_ray_address``); ``None``: this host.
    ray_address: Sourced[str | None] = Sourced(None, "default")
    #: ``--sglang-header`` values, each for one server or all (values are secrets).
    headers: tuple[Header, ...] = ()

    #: What an inconclusive verdict does to its test: fail, skip or warn.
    inconclusive: Sourced[str] = Sourced("fail", "default")
    #: ``--sglang-shard K/N``: this run's part of a split suite, or None for all of it.
    shard: Sourced[Shard | None] = Sourced(None, "default")

    def profile(self, name: str) -> Profile | None:
        """Return the profile called ``name``, if any."""
        return self.profiles.get(name)

    def server(self, name: str) -> ServerUrl | None:
        """Return the attached server called ``name``, if any."""
        return next((s for s in self.servers if s.name == name), None)

    @functools.cached_property
    def targets(self) -> Mapping[str, ServerTarget]:
        """Every server the session knows, by name (attached first), resolved once."""
        return MappingProxyType(
            build_targets(self.servers, self.profiles, self.expectations, self.headers)
        )

    def target(self, name: str) -> ServerTarget | None:
        """Return the server called ``name`` (attached or a profile), if any."""
        return self.targets.get(name)

    def default_server(self) -> str | None:
        """Return the server a test that names none gets, or None when that is ambiguous.

        The one called ``default``; else the only attached server; else, with none
        attached, the only profile.
        """
        attached = tuple(s.name for s in self.servers)
        if DEFAULT_SERVER_NAME in self.targets:
            return DEFAULT_SERVER_NAME
        if len(attached) == 1:
            return attached[0]
        if not attached and len(self.profiles) == 1:
            return next(iter(self.profiles))
        return None

    @functools.cached_property
    def secrets(self) -> tuple[str, ...]:
        """The session's known secret values (``config/redaction.py`` hides them everywhere).

        The API key, every ``--sglang-header`` value, the values of secret flags
        (``--api-key``...) in the profiles' args and the emulator args, and the values of the
        profiles' secret-named env variables.
        """
        found: list[str] = []
        if self.api_key.value:
            found.append(self.api_key.value)
        # A header's value, and its token alone ("Bearer KEY" -> "KEY"): either may be quoted.
        for header in self.headers:
            found += [header.value, header.value.rpartition(" ")[2]]
        found += secret_flag_values(self.emulator_args.value)
        for profile in self.profiles.values():
            found += secret_flag_values(profile.args)
            found += [v for k, v in profile.env.items() if is_secret_name(k) and v]
        return tuple(dict.fromkeys(found))

    @functools.cached_property
    def redact(self) -> Redactor:
        """The redaction rule with this session's secrets: ``settings.redact(text)``."""
        return Redactor(self.secrets)

    def __repr__(self) -> str:
        # pytest -l shows a test's locals, sglang_settings among them: never the secrets.
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return self.redact(f"Settings({body})")


@dataclass(frozen=True)
class Raw:
    """The raw strings found in the highest-precedence source, before parsing."""

    value: list[str]
    source: str
    #: What a relative path in the value is relative to: the directory pytest was invoked
    #: from for the command line and environment, the ini file's directory for the ini file.
    base: Path


def lookup(
    spec: OptionSpec, config: pytest.Config, environ: Mapping[str, str] | None = None
) -> Raw | None:
    """Return the highest-precedence raw value of ``spec`` as a list of strings, or None.

    Precedence: the flag, ``-o sglang_NAME=VALUE``, the environment, the ini file.
    """
    env_map = os.environ if environ is None else environ
    invoked = Path(config.invocation_params.dir)
    cli = config.getoption(spec.dest, default=None) if spec.cli else None
    if cli is not None and cli != []:
        values = ["true"] if cli is True else cli if isinstance(cli, list) else [cli]
        return Raw([str(v) for v in values], f"{spec.cli} on the command line", invoked)
    overrides = config.getoption("override_ini", default=None) or ()
    overridden = any(o.partition("=")[0].strip() == spec.ini for o in overrides)
    env = env_map.get(spec.env)
    if not overridden and env is not None and env.strip():
        parts = shlex.split(env) if spec.repeatable else [env.strip()]
        return Raw(parts, f"environment variable {spec.env}", invoked)
    ini = config.getini(spec.ini)
    ini_values = [str(v) for v in ini] if isinstance(ini, list) else [str(ini)]
    ini_values = [v.strip() for v in ini_values if v.strip()]
    if not ini_values:
        return None
    if overridden:
        return Raw(ini_values, f"-o {spec.ini} on the command line", invoked)
    where = f" in {config.inipath}" if config.inipath else ""
    base = config.inipath.parent if config.inipath else config.rootpath
    return Raw(ini_values, f"ini option {spec.ini}{where}", base)


def _lookup_one(spec: OptionSpec, config: pytest.Config, environ: Mapping[str, str]) -> Raw | None:
    """Return the raw value of a single-valued option, or None when it is not set."""
    raw = lookup(spec, config, environ)
    if raw is not None and len(raw.value) != 1:
        raise usage_error(
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
    raw = lookup(URL, config, environ)
    if raw is None:
        return ()
    servers: list[ServerUrl] = []
    for item in raw.value:
        server = parse_server_url(URL, item, raw.source)
        clash = next((s for s in servers if s.name == server.name), None)
        if clash is not None:
            raise usage_error(
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
    raw = lookup(EXPECT, config, environ)
    if raw is None:
        return ()
    expectations = tuple(parse_expectation(item, raw.source) for item in raw.value)
    names = {s.name for s in servers}
    for expectation in expectations:
        if expectation.server is not None and servers and expectation.server not in names:
            raise usage_error(
                EXPECT,
                raw.source,
                f"{expectation.describe()!r} names server {expectation.server!r}, "
                f"which is not among the attached servers ({', '.join(sorted(names))})",
                "use one of those names, or drop the NAME: prefix to check every server",
            )
    return expectations


def _resolve_headers(
    config: pytest.Config,
    environ: Mapping[str, str],
    servers: Sequence[ServerUrl],
    profiles: Mapping[str, Profile],
) -> tuple[Header, ...]:
    raw = lookup(HEADER, config, environ)
    if raw is None:
        return ()
    headers = tuple(parse_header(item, raw.source) for item in raw.value)
    names = {s.name for s in servers} | set(profiles)
    for header in headers:
        if header.server is not None and header.server not in names:
            raise usage_error(
                HEADER,
                raw.source,
                f"{header.describe()!r} names server {header.server!r}, which is neither "
                f"attached nor a profile ({', '.join(sorted(names)) or 'none configured'})",
                "use one of those names, or drop the NAME: prefix to send it to every server",
            )
    return headers


def _resolve_path(
    spec: OptionSpec,
    config: pytest.Config,
    environ: Mapping[str, str],
    problem: Callable[[Path], str | None],
    fix: str,
    *,
    output: bool = False,
) -> Sourced[Path | None]:
    """Resolve a path option; a relative path is relative to where its value was written.

    ``problem`` returns what is wrong with the resolved path, or None when it will do. An
    ``output`` path's last part is not resolved: a link there is judged, not followed.
    """
    raw = _lookup_one(spec, config, environ)
    if raw is None:
        return Sourced(None, "default")
    if output:
        path = output_path(raw.base, raw.value[0])
    else:
        path = Path(raw.base, raw.value[0]).resolve()
    wrong = problem(path)
    if wrong is not None:
        where = "" if Path(raw.value[0]).is_absolute() else f" (relative to {raw.base})"
        raise usage_error(spec, raw.source, f"{raw.value[0]!r}{where} {wrong}", fix)
    return Sourced(path, raw.source)


_OUTPUT_FIX = OUTPUT_FIX + ", e.g. "


def _not_a_file(path: Path) -> str | None:
    return None if path.is_file() else "is not a file"


_FAKE_GPUS_FIX = "give a directory whose gpus.json lists the fake GPUs (or none yet)"


def _not_a_fake_gpu_dir(path: Path) -> str | None:
    """Why ``path`` is no fake-GPU directory: not a directory, or a malformed gpus.json."""
    if not path.is_dir():
        return "is not a directory"
    if not (path / "gpus.json").exists():
        return None  # the probe says so when GPU state is read (a skip, as on a GPU-less host)
    from pytest_sglang.config.fake_gpus import read_fake_gpus

    try:
        read_fake_gpus(path / "gpus.json")
    except ValueError as exc:
        return f"has a gpus.json that cannot be used: {exc}"
    return None


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
    from pytest_sglang.config.profiles import load_profiles

    return load_profiles(pyproject, profiles_file)


def _mentions_profiles(pyproject: Path) -> bool:
    try:
        return "pytest-sglang" in pyproject.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def resolve_settings(config: pytest.Config, environ: Mapping[str, str] | None = None) -> Settings:
    """Resolve every setting (flag > ``-o`` > environment > ini file > default), validated.

    :raises pytest.UsageError: naming the option, the source of the bad value and the fix.
    """
    env = os.environ if environ is None else environ
    check_settings({s: (r.value, r.source) for s in OPTIONS if (r := lookup(s, config, env))})
    servers = _resolve_servers(config, env)
    api_key = lookup(API_KEY, config, env)
    gpu_host = lookup(GPU_HOST, config, env)
    if gpu_host is not None and gpu_host.value[0].startswith("-"):
        raise usage_error(
            GPU_HOST,
            gpu_host.source,
            f"{gpu_host.value[0]!r} is not a host",
            "give [USER@]HOST, e.g. ubuntu@gpu-box",
        )
    profiles = _resolve_profiles(config, env)
    headers = _resolve_headers(config, env, servers, profiles)
    _check_one_authorization(api_key, headers)
    report = _resolve_path(
        REPORT, config, env, output_problem, _OUTPUT_FIX + "sglang-report.json", output=True
    )
    markdown = _resolve_path(
        MARKDOWN, config, env, output_problem, _OUTPUT_FIX + "$GITHUB_STEP_SUMMARY", output=True
    )
    _check_distinct_outputs(config, ((REPORT, report), (MARKDOWN, markdown)))
    return Settings(
        launcher=_resolve_one(LAUNCHER, config, env, parse_launcher, LAUNCHERS[0]),
        emulator_args=_resolve_one(EMULATOR_ARGS, config, env, parse_args, ()),
        profiles=profiles,
        headers=headers,
        gpu_host=Sourced(gpu_host.value[0], gpu_host.source)
        if gpu_host
        else Sourced(None, "default"),
        gpu_fake=_resolve_path(GPU_FAKE, config, env, _not_a_fake_gpu_dir, _FAKE_GPUS_FIX),
        report=report,
        markdown=markdown,
        servers=servers,
        ready_timeout=_resolve_one(
            READY_TIMEOUT, config, env, parse_duration, DEFAULT_READY_TIMEOUT
        ),
        api_key=Sourced(api_key.value[0], api_key.source, secret=True)
        if api_key
        else Sourced(None, "default"),
        require=_resolve_one(REQUIRE, config, env, parse_bool, False),
        request_timeout=_resolve_one(
            REQUEST_TIMEOUT, config, env, parse_duration, DEFAULT_REQUEST_TIMEOUT
        ),
        stall_timeout=_resolve_one(
            STALL_TIMEOUT, config, env, parse_duration, DEFAULT_STALL_TIMEOUT
        ),
        first_token_timeout=_resolve_one(
            FIRST_TOKEN_TIMEOUT, config, env, parse_duration, DEFAULT_FIRST_TOKEN_TIMEOUT
        ),
        max_consecutive_failures=_resolve_one(
            MAX_CONSECUTIVE_FAILURES, config, env, parse_count, DEFAULT_MAX_CONSECUTIVE_FAILURES
        ),
        load_workers=_resolve_one(LOAD_WORKERS, config, env, parse_workers, DEFAULT_LOAD_WORKERS),
        ray_address=_resolve_one(RAY_ADDRESS, config, env, parse_ray_address, None),
        expectations=_resolve_expectations(config, env, servers),
        inconclusive=_resolve_one(
            INCONCLUSIVE, config, env, parse_inconclusive, INCONCLUSIVE_CHOICES[0]
        ),
        shard=_resolve_one(SHARD, config, env, _parse_shard, None),
    )


def _check_one_authorization(api_key: Raw | None, headers: Sequence[Header]) -> None:
    """One source for a server's ``Authorization``: ``--sglang-api-key`` or a header, not both.

    The key goes to every server; an ``Authorization`` header given as well would replace it
    for its servers, and a 401 would then blame a key that was never sent.
    """
    if api_key is None:
        return
    for header in headers:
        if header.name.lower() == "authorization":
            servers = f"server {header.server!r}" if header.server else "every server"
            raise usage_error(
                HEADER,
                header.source,
                f"{header.describe()!r} and {API_KEY.cli} (from {api_key.source}) both set "
                f"the Authorization header of {servers}",
                f"give the key one way: {API_KEY.cli} KEY (sent to every server), or {HEADER.cli} "
                f"NAME:Authorization=... for each server and no {API_KEY.cli}",
            )


def _check_distinct_outputs(
    config: pytest.Config, outputs: Sequence[tuple[OptionSpec, Sourced[Path | None]]]
) -> None:
    """Refuse two outputs that name one file (``--junitxml`` too): each would corrupt the other.

    Paths are compared resolved (links, ``..``), and by inode when both exist.
    """
    seen: list[tuple[str, str, Path]] = []
    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath:
        junit = Path(config.invocation_params.dir, xmlpath)
        seen.append(("--junitxml", repr(str(xmlpath)), Path(os.path.realpath(junit))))
    for spec, sourced in outputs:
        if sourced.value is None:
            continue
        path = Path(os.path.realpath(sourced.value))
        for name, shown, other in seen:
            if other == path or _same_file(other, path):
                raise usage_error(
                    spec,
                    sourced.source,
                    f"{str(sourced.value)!r} is the same file as {name} ({shown}): two outputs "
                    "written to one file corrupt each other",
                    "give each output its own path",
                )
        seen.append((spec.label, f"from {sourced.source}", path))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _parse_shard(spec: OptionSpec, raw: str, source: str) -> Shard | None:
    try:
        return parse_shard(raw)
    except ValueError as exc:
        raise usage_error(
            spec, source, str(exc), "give K/N with 1 <= K <= N, e.g. 1/2 and 2/2 on two runners"
        ) from None


#: Where ``pytest_configure`` stores the resolved :class:`Settings`.
SETTINGS_KEY = pytest.StashKey[Settings]()
