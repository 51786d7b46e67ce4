"""Settings: every option resolved once, into a frozen :class:`Settings` in ``config.stash``.

One :class:`ServerTarget` per server (attached, a profile to launch, or both), decided once.

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
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from pytest_sglang.config.options import (
    API_KEY,
    DEFAULT_FIRST_TOKEN_TIMEOUT,
    DEFAULT_LOAD_WORKERS,
    DEFAULT_MAX_CONSECUTIVE_FAILURES,
    DEFAULT_READY_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SERVER_NAME,
    DEFAULT_STALL_TIMEOUT,
    EXPECT,
    GPU_FAKE,
    HEADER,
    INCONCLUSIVE_CHOICES,
    LAUNCHERS,
    MARKDOWN,
    OPTIONS,
    PROFILES,
    REPORT,
    URL,
    OptionSpec,
    pyproject_of,
)
from pytest_sglang.config.parsing import (
    parse_expectation,
    parse_header,
    parse_server_url,
    parse_shard,
    usage_error,
)
from pytest_sglang.config.paths import OUTPUT_FIX, output_path, output_problem
from pytest_sglang.config.redaction import Redactor, secret_flag_values, server_secrets
from pytest_sglang.config.schema import check_option
from pytest_sglang.config.values import Expectation, Header, ServerUrl, Shard, Sourced

if TYPE_CHECKING:
    from pytest_sglang.config.profiles import Profile

__all__ = ["SETTINGS_KEY", "Raw", "ServerTarget", "Settings", "lookup", "resolve_settings"]

T = TypeVar("T")


@dataclass(frozen=True)
class ServerTarget:
    """A server the session knows: its name, how it is reached, what it must serve."""

    name: str
    #: The attached server's base URL, or None when the profile is launched.
    url: str | None
    #: The profile of that name, if any (launched when ``url`` is None).
    profile: Profile | None
    #: Identity checks for this server, in precedence order (one per key).
    expectations: tuple[Expectation, ...]
    #: Where the URL or the profile came from, for messages.
    source: str
    #: ``sglang``, or ``openai`` for a plain OpenAI-compatible server.
    kind: str = "sglang"
    #: Extra HTTP headers for this server (``--sglang-header``), in order; values secret.
    headers: tuple[Header, ...] = ()

    @property
    def header_map(self) -> dict[str, str]:
        """The extra headers as a mapping (a header given for this server wins)."""
        ordered = sorted(self.headers, key=lambda h: h.server is not None)  # this server's last
        return {h.name: h.value for h in ordered}


@dataclass(frozen=True)
class Settings:
    """The plugin's effective settings, validated, with the source of every value."""

    servers: tuple[ServerUrl, ...] = ()
    ready_timeout: Sourced[float] = Sourced(DEFAULT_READY_TIMEOUT, "default")
    api_key: Sourced[str | None] = Sourced(None, "default", secret=True)
    require: Sourced[bool] = Sourced(False, "default")
    expectations: tuple[Expectation, ...] = ()
    launcher: Sourced[str] = Sourced(LAUNCHERS[0], "default")
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
    #: Load-generator workers per run: processes, or Ray actors.
    load_workers: Sourced[int] = Sourced(DEFAULT_LOAD_WORKERS, "default")
    #: The Ray cluster the workers run on; ``None``: this host.
    ray_address: Sourced[str | None] = Sourced(None, "default")
    #: ``--sglang-header`` values, each for one server or all (values are secrets).
    headers: tuple[Header, ...] = ()
    #: What an inconclusive verdict does to its test: fail, skip or warn.
    inconclusive: Sourced[str] = Sourced(INCONCLUSIVE_CHOICES[0], "default")
    #: ``--sglang-shard K/N``: this run's part of a split suite, or None for all of it.
    shard: Sourced[Shard | None] = Sourced(None, "default")

    @functools.cached_property
    def targets(self) -> Mapping[str, ServerTarget]:
        """Every server the session knows, by name (attached, then profiles), resolved once."""
        attached = {s.name: s for s in self.servers}
        targets: dict[str, ServerTarget] = {}
        for name in (*attached, *(p for p in self.profiles if p not in attached)):
            server, profile = attached.get(name), self.profiles.get(name)
            own = tuple(e for e in self.expectations if e.server in (None, name))
            if profile is not None:  # the command line (or env, ini) wins over the profile's
                own += tuple(e for e in profile.expectations() if e.key not in {o.key for o in own})
            # An openai+ URL declares the kind; otherwise the profile of the same name may.
            kind = server.kind if server is not None and server.kind != "sglang" else None
            targets[name] = ServerTarget(
                name,
                server.url if server else None,
                profile,
                own,
                server.source if server else profile.source if profile else "",
                kind or (profile.kind if profile is not None else "sglang"),
                tuple(h for h in self.headers if h.server in (None, name)),
            )
        return MappingProxyType(targets)

    @property
    def launches_hold_no_gpus(self) -> bool:
        """Whether a launch holds no GPU: the emulator launcher without fake GPUs.

        Such a launch needs no GPU check, share or telemetry: a dry run must not fail because
        another job holds the real GPUs.
        """
        return self.launcher.value == "emulator" and self.gpu_fake.value is None

    def default_server(self) -> str | None:
        """Return the server a test that names none gets, or None when that is ambiguous.

        ``default``, else the only attached server, else (none attached) the only profile.
        """
        if DEFAULT_SERVER_NAME in self.targets:
            return DEFAULT_SERVER_NAME
        names = [s.name for s in self.servers] or list(self.profiles)
        return names[0] if len(names) == 1 else None

    @functools.cached_property
    def secrets(self) -> tuple[str, ...]:
        """The session's known secrets: API key, header values, secret flags' and env values."""
        found = [self.api_key.value or "", *secret_flag_values(self.emulator_args.value)]
        for header in self.headers:
            found += [header.value, header.value.rpartition(" ")[2]]
        for profile in self.profiles.values():
            found += server_secrets(profile.args, profile.env)
        return tuple(filter(None, dict.fromkeys(found)))

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


def lookup(spec: OptionSpec, config: pytest.Config) -> Raw | None:
    """Return the highest-precedence raw value: flag, ``-o``, environment, ini; or None."""
    invoked = Path(config.invocation_params.dir)
    cli = config.getoption(spec.dest, default=None) if spec.cli else None
    if cli is not None:
        values = ["true"] if cli is True else cli if isinstance(cli, list) else [cli]
        return Raw([str(v) for v in values], f"{spec.cli} on the command line", invoked)
    overrides = config.getoption("override_ini", default=None) or ()
    overridden = any(o.partition("=")[0].strip() == spec.ini for o in overrides)
    env = os.environ.get(spec.env)
    if not overridden and env is not None and env.strip():
        parts = shlex.split(env) if spec.repeatable else [env.strip()]
        return Raw(parts, f"environment variable {spec.env}", invoked)
    ini = config.getini(spec.ini)
    ini_values = [v.strip() for v in (ini if isinstance(ini, list) else [ini]) if v.strip()]
    if not ini_values:
        return None
    if overridden:
        return Raw(ini_values, f"-o {spec.ini} on the command line", invoked)
    where = f" in {config.inipath}" if config.inipath else ""
    base = config.inipath.parent if config.inipath else config.rootpath
    return Raw(ini_values, f"ini option {spec.ini}{where}", base)


def _seconds(text: str) -> float:
    text = text.strip()
    unit = next((u for u in ("ms", "s", "m", "h") if text.endswith(u)), "")
    return float(text.removesuffix(unit)) * {"ms": 0.001, "m": 60.0, "h": 3600.0}.get(unit, 1.0)


def _split(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        problem = f"{text!r} cannot be split: {exc}"
        raise ValueError(problem, "quote arguments the way a shell would") from None


#: How the text of each kind of option, checked by the schema, becomes the setting of the
#: option's name (a ``ValueError(problem, fix)`` for what no schema can say); a kind not
#: listed is the text as given.
_CONVERT: dict[str, Callable[[str], object]] = {
    "boolean": lambda text: text.strip().lower() in {"1", "true", "yes", "on"},
    "duration": _seconds,
    "count": int,
    "workers": int,
    "inconclusive": lambda text: text.strip().lower(),
    "ray-address": str.strip,
    "args": _split,
    "shard": parse_shard,
}


def _resolve_servers(raw: Raw | None) -> tuple[ServerUrl, ...]:
    servers: dict[str, ServerUrl] = {}
    for server in _each(raw, functools.partial(parse_server_url, URL)):
        clash = servers.setdefault(server.name, server)
        if clash is not server:
            raise usage_error(
                URL,
                server.source,
                f"server name {server.name!r} is given twice ({clash.url} and {server.url})",
                "give each server its own name: NAME=URL, e.g. baseline=http://h:30000 "
                "eagle3=http://h:30001",
            )
    return tuple(servers.values())


def _each(raw: Raw | None, parse: Callable[[str, str], T]) -> tuple[T, ...]:
    return tuple(parse(value, raw.source) for value in raw.value) if raw else ()


def _check_names(spec: OptionSpec, given: Sequence[Header | Expectation], names: set[str]) -> None:
    """Refuse an expectation or header for a server of no such name."""
    for item in given:
        if item.server is not None and item.server not in names:
            attached = "among the attached servers" if spec is EXPECT else "attached nor a profile"
            raise usage_error(
                spec,
                item.source,
                f"{item.describe()!r} names server {item.server!r}, which is "
                f"{'not' if spec is EXPECT else 'neither'} {attached} "
                f"({', '.join(sorted(names)) or 'none configured'})",
                "use one of those names, or drop the NAME: prefix to "
                + ("check every server" if spec is EXPECT else "send it to every server"),
            )


def _resolve_path(spec: OptionSpec, text: str, base: Path) -> Path:
    """Resolve a path option relative to where it was written; refuse what ``_PATHS`` names.

    An output path's last part is not resolved: a link there is judged, not followed.
    """
    problem, fix = _PATHS[spec]
    path = output_path(base, text) if problem is output_problem else Path(base, text).resolve()
    wrong = problem(path)
    if wrong is not None:
        where = "" if Path(text).is_absolute() else f" (relative to {base})"
        raise ValueError(f"{text!r}{where} {wrong}", fix)
    return path


def _not_a_fake_gpu_dir(path: Path) -> str | None:
    """Why ``path`` is no fake-GPU directory: not a directory, or a malformed gpus.json."""
    if not path.is_dir():
        return "is not a directory"
    if (path / "gpus.json").exists():  # none yet: a skip when GPU state is read
        from pytest_sglang.config.fake_gpus import read_fake_gpus

        try:
            read_fake_gpus(path / "gpus.json")
        except ValueError as exc:
            return f"has a gpus.json that cannot be used: {exc}"
    return None


#: The path options: why a path cannot be used (None: it can), and the fix.
_PATHS: dict[OptionSpec, tuple[Callable[[Path], str | None], str]] = {
    PROFILES: (
        lambda path: None if path.is_file() else "is not a file",
        "give the path of a TOML file with [profiles.NAME] tables",
    ),
    GPU_FAKE: (
        _not_a_fake_gpu_dir,
        "give a directory whose gpus.json lists the fake GPUs (or none yet)",
    ),
    REPORT: (output_problem, OUTPUT_FIX + ", e.g. sglang-report.json"),
    MARKDOWN: (output_problem, OUTPUT_FIX + ", e.g. $GITHUB_STEP_SUMMARY"),
}


def resolve_settings(config: pytest.Config) -> Settings:
    """Resolve every setting (flag > ``-o`` > environment > ini file > default), validated."""
    raws = {spec: raw for spec in OPTIONS if (raw := lookup(spec, config))}
    values = {
        spec.dest.removeprefix("sglang_"): _resolve_one(spec, raw)
        for spec, raw in raws.items()
        if spec.kind or spec in _PATHS
    }
    servers = _resolve_servers(raws.get(URL))
    expectations = _each(raws.get(EXPECT), parse_expectation)
    if servers:
        _check_names(EXPECT, expectations, {s.name for s in servers})
    profiles_file = values.pop("profiles", Sourced(None, "default")).value
    pyproject, mentioned = pyproject_of(config)
    profiles: dict[str, Profile] = {}
    if profiles_file is not None or mentioned:
        # Imported here: tomllib and the profile code cost milliseconds in every pytest run.
        from pytest_sglang.config.profiles import load_profiles

        profiles = load_profiles(pyproject, profiles_file)
    headers = _each(raws.get(HEADER), parse_header)
    _check_names(HEADER, headers, {s.name for s in servers} | set(profiles))
    settings = Settings(
        servers, expectations=expectations, profiles=profiles, headers=headers, **values
    )
    _check_one_authorization(settings)
    _check_distinct_outputs(config, settings)
    return settings


def _resolve_one(spec: OptionSpec, raw: Raw) -> Sourced[Any]:
    """Convert the text of a single-valued option (a path: where it was written) to its value."""
    (text,) = raw.value  # one: a flag stored once, an environment variable or an ini string
    check_option(spec, text, raw.source)
    try:
        if spec in _PATHS:
            value: object = _resolve_path(spec, text, raw.base)
        else:
            value = _CONVERT.get(spec.kind or "", str)(text)
    except ValueError as exc:
        raise usage_error(spec, raw.source, *exc.args) from None
    return Sourced(value, raw.source, secret=spec is API_KEY)


def _check_one_authorization(settings: Settings) -> None:
    """Refuse ``--sglang-api-key`` with an ``Authorization`` header: one would replace the other."""
    api_key = settings.api_key
    for header in settings.headers:
        if api_key.source != "default" and header.name.lower() == "authorization":
            servers = f"server {header.server!r}" if header.server else "every server"
            raise usage_error(
                HEADER,
                header.source,
                f"{header.describe()!r} and {API_KEY.cli} (from {api_key.source}) both set "
                f"the Authorization header of {servers}",
                f"give the key one way: {API_KEY.cli} KEY (sent to every server), or {HEADER.cli} "
                f"NAME:Authorization=... for each server and no {API_KEY.cli}",
            )


def _check_distinct_outputs(config: pytest.Config, settings: Settings) -> None:
    """Refuse two outputs (``--junitxml`` too) that name one file: each would corrupt the other."""
    seen: list[tuple[str, str, Path]] = []
    xmlpath = getattr(config.option, "xmlpath", None)
    if xmlpath:
        seen.append(("--junitxml", repr(str(xmlpath)), Path(config.invocation_params.dir, xmlpath)))
    for spec, sourced in ((REPORT, settings.report), (MARKDOWN, settings.markdown)):
        if sourced.value is None:
            continue
        for name, shown, other in seen:
            if _same_file(other, sourced.value):
                raise usage_error(
                    spec,
                    sourced.source,
                    f"{str(sourced.value)!r} is the same file as {name} ({shown}): two outputs "
                    "written to one file corrupt each other",
                    "give each output its own path",
                )
        seen.append((spec.label, f"from {sourced.source}", sourced.value))


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: one inode, or (not both there yet) one real path."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


#: Where ``pytest_configure`` stores the resolved :class:`Settings`.
SETTINGS_KEY = pytest.StashKey[Settings]()
