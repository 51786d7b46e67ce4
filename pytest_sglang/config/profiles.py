"""Server profiles: named launch recipes read from TOML.

A profile lives in ``pyproject.toml`` under ``[tool.pytest-sglang.profiles.NAME]`` or in the
file given by ``--sglang-profiles PATH`` under ``[profiles.NAME]``::

    [profiles.baseline]
    model-path = "moonshotai/Kimi-K2.5"
    tp = 8
    args = ["--mem-fraction-static", "0.85", "--max-running-requests", "256"]
    env = { NCCL_P2P_DISABLE = "1" }
    expect = { max_model_len = 262144, tp_size = 8 }

    [profiles.eagle3]
    extends = "baseline"
    args = ["--speculative-algorithm", "EAGLE3", "--speculative-num-steps", "3"]
    expect = { speculative_algorithm = "EAGLE3" }

``extends`` merges ``args`` flag by flag, ``env`` and ``expect`` key by key; the extending
profile wins. Every mistake is a :class:`pytest.UsageError` naming the file, profile and key.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.defaults import SERVER_KINDS
from pytest_sglang.config.parsing import is_valid_expect_key
from pytest_sglang.config.redaction import Redactor, is_secret_name, secret_flag_values
from pytest_sglang.config.values import Expectation, is_valid_server_name

__all__ = ["MAX_EXTENDS_DEPTH", "PROFILE_KEYS", "Profile", "load_profiles", "merge_args"]

#: Every key a profile may have.
PROFILE_KEYS = ("model-path", "tp", "args", "env", "expect", "extends", "command", "kind")
#: How many profiles one ``extends`` chain may hold (a chain this long is a mistake, and the
#: resolution must end in a clean error, not in Python's recursion limit).
MAX_EXTENDS_DEPTH = 32
#: Flags the launcher sets itself; a profile giving them would fight the launcher.
_RESERVED_FLAGS = (
    "--model-path",
    "--model",
    "--tp",
    "--tp-size",
    "--tensor-parallel-size",
    "--host",
    "--port",
)


@dataclass(frozen=True)
class Profile:
    """A resolved server profile (``extends`` applied)."""

    name: str
    model_path: str
    tp: int
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    expect: Mapping[str, object] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    source: str = ""
    #: ``sglang`` or ``openai``: a plain OpenAI-compatible server, attached by URL under the
    #: profile's name (the plugin launches SGLang only); ``model-path`` is optional then.
    kind: str = "sglang"

    def expectations(self) -> tuple[Expectation, ...]:
        """Return the profile's ``expect`` table as readiness-gate expectations."""
        where = f"profile {self.name!r} in {self.source}"
        return tuple(Expectation(key=k, value=v, source=where) for k, v in self.expect.items())

    def __repr__(self) -> str:
        # pytest -l shows locals: never the profile's --api-key or HF_TOKEN.
        secrets = secret_flag_values(self.args)
        secrets += [v for k, v in self.env.items() if is_secret_name(k)]
        body = (
            f"name={self.name!r}, model_path={self.model_path!r}, tp={self.tp!r}, "
            f"args={self.args!r}, env={dict(self.env)!r}, expect={dict(self.expect)!r}, "
            f"command={self.command!r}, source={self.source!r}, kind={self.kind!r}"
        )
        return Redactor(secrets)(f"Profile({body})")


def _error(path: Path | str, profile: str, key: str | None, problem: str, fix: str) -> Exception:
    where = f"profile {profile!r}" + (f", key {key!r}" if key else "")
    return pytest.UsageError(f"{path}: {where}: {problem}; {fix}")


def _split_flags(args: list[str], path: Path | str, profile: str) -> list[tuple[str, list[str]]]:
    """Group ``args`` into (flag, values) pairs; ``--flag=value`` becomes (flag, [value])."""
    groups: list[tuple[str, list[str]]] = []
    for token in args:
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            groups.append((flag, [value] if eq else []))
        elif groups:
            groups[-1][1].append(token)
        else:
            raise _error(
                path,
                profile,
                "args",
                f"{token!r} does not follow a --flag",
                'write server flags as ["--flag", "value", ...]',
            )
    return groups


def merge_args(
    base: list[str], override: list[str], path: Path | str = "", profile: str = ""
) -> list[str]:
    """Merge two server argument lists flag by flag; ``override``'s value of a flag wins.

    Flags keep the base's order; flags new in ``override`` follow in their own order.
    """
    merged: dict[str, list[str]] = {}
    for flag, values in _split_flags(base, path, profile) + _split_flags(override, path, profile):
        merged[flag.replace("_", "-")] = values
    return [token for flag, values in merged.items() for token in (flag, *values)]


def _coerce_args(value: object, path: Path | str, name: str) -> list[str]:
    if not isinstance(value, list):
        raise _error(
            path,
            name,
            "args",
            f"expected a list of strings, got {value!r}",
            'write e.g. args = ["--mem-fraction-static", "0.85"]',
        )
    out = []
    for item in value:
        # TOML numbers are accepted for convenience: ["--max-running-requests", 48].
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise _error(
                path,
                name,
                "args",
                f"{item!r} is not a string",
                'write every flag and value as a string, e.g. "--tp-size"',
            )
        out.append(str(item))
    for flag, _ in _split_flags(out, path, name):
        if flag in _RESERVED_FLAGS:
            raise _error(
                path,
                name,
                "args",
                f"{flag} is set by the launcher",
                "use the profile keys model-path and tp; host and port are chosen by the plugin",
            )
    return out


def _check_table(raw: Mapping[str, Any], path: Path | str, name: str) -> None:
    unknown = sorted(set(raw) - set(PROFILE_KEYS))
    if unknown:
        raise _error(
            path, name, unknown[0], "unknown key", f"valid keys are {', '.join(PROFILE_KEYS)}"
        )
    if "model-path" in raw and (not isinstance(raw["model-path"], str) or not raw["model-path"]):
        raise _error(
            path,
            name,
            "model-path",
            f"expected a non-empty string, got {raw['model-path']!r}",
            'write e.g. model-path = "Qwen/Qwen3-8B"',
        )
    tp = raw.get("tp", 1)
    if isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= 64:
        raise _error(
            path,
            name,
            "tp",
            f"expected a tensor-parallel size 1..64, got {tp!r}",
            "write e.g. tp = 8",
        )
    for key in ("env", "expect"):
        if key in raw and not isinstance(raw[key], dict):
            raise _error(
                path,
                name,
                key,
                f"expected a table, got {raw[key]!r}",
                f'write e.g. {key} = {{ NAME = "value" }}',
            )
    for env_name, env_value in raw.get("env", {}).items():
        if not env_name or "=" in env_name or "\0" in env_name:
            raise _error(
                path,
                name,
                "env",
                f"{env_name!r} is not an environment variable name (empty, or with '=' or "
                "NUL, which no environment can hold)",
                "write a name of letters, digits and '_', e.g. NCCL_P2P_DISABLE",
            )
        if isinstance(env_value, str) and "\0" in env_value:
            raise _error(
                path,
                name,
                "env",
                f"the value of {env_name} holds a NUL character, which no environment can hold",
                "remove it",
            )
        if not isinstance(env_value, (str, int, float)) or isinstance(env_value, bool):
            raise _error(
                path,
                name,
                "env",
                f"{env_name} = {env_value!r} is not a string",
                f'write e.g. {env_name} = "1"',
            )
    for key in raw.get("expect", {}):
        if not is_valid_expect_key(key):
            raise _error(
                path,
                name,
                "expect",
                f"{key!r} is not a valid key",
                "use model_id, max_model_len or a /server_info key such as tp_size "
                "(letters, digits and '_', no spaces)",
            )
    kind = raw.get("kind", "sglang")
    if kind not in SERVER_KINDS:
        raise _error(
            path,
            name,
            "kind",
            f"{kind!r} is not a server kind",
            f'use one of {", ".join(repr(k) for k in SERVER_KINDS)}: kind = "openai" declares a '
            "plain OpenAI-compatible server (vLLM, llama.cpp, TGI...) attached by URL",
        )
    command = raw.get("command")
    if command is not None and (
        not isinstance(command, list)
        or not command
        or not all(isinstance(c, str) and c for c in command)
    ):
        raise _error(
            path,
            name,
            "command",
            f"expected a non-empty list of strings, got {command!r}",
            'write e.g. command = ["sglang", "serve"]',
        )
    extends = raw.get("extends")
    if extends is not None and not isinstance(extends, str):
        raise _error(
            path,
            name,
            "extends",
            f"expected a profile name, got {extends!r}",
            'write e.g. extends = "baseline"',
        )


def _chain(name: str, tables: Mapping[str, Mapping[str, Any]], path: Path | str) -> list[str]:
    """Return ``name``'s ``extends`` chain, itself first; iterative, so any depth is safe."""
    chain = [name]
    while True:
        parent_name = tables[chain[-1]].get("extends")
        if parent_name is None:
            return chain
        if parent_name in chain:
            cycle = " -> ".join((*chain, parent_name))
            raise _error(path, name, "extends", f"cycle {cycle}", "remove one of the extends")
        if parent_name not in tables:
            raise _error(
                path,
                chain[-1],
                "extends",
                f"no profile named {parent_name!r}",
                f"define [profiles.{parent_name}] or use one of {', '.join(sorted(tables))}",
            )
        chain.append(parent_name)
        if len(chain) > MAX_EXTENDS_DEPTH:
            shown = " -> ".join((*chain[:3], "...", chain[-1]))
            raise _error(
                path,
                name,
                "extends",
                f"the extends chain is more than {MAX_EXTENDS_DEPTH} profiles deep ({shown})",
                "let profiles extend a common base instead of each other in a line",
            )


def _resolve(
    name: str, tables: Mapping[str, Mapping[str, Any]], path: Path | str
) -> dict[str, Any]:
    merged: dict[str, Any] = {"args": [], "env": {}, "expect": {}}
    for link in reversed(_chain(name, tables, path)):
        raw = tables[link]
        for key in ("model-path", "tp", "command", "kind"):
            if key in raw:
                merged[key] = raw[key]
        merged["args"] = merge_args(
            merged["args"], _coerce_args(raw.get("args", []), path, link), path, link
        )
        merged["env"] = {**merged["env"], **{k: str(v) for k, v in raw.get("env", {}).items()}}
        merged["expect"] = {**merged["expect"], **raw.get("expect", {})}
    return merged


def profiles_from_tables(
    tables: Mapping[str, Any], path: Path | str, table_prefix: str
) -> dict[str, Profile]:
    """Validate and resolve the raw TOML tables of one file into profiles."""
    if not isinstance(tables, dict):
        raise pytest.UsageError(
            f"{path}: [{table_prefix}] must be a table of profiles; write "
            f"[{table_prefix}.NAME] sections"
        )
    for name, raw in tables.items():
        if not is_valid_server_name(name):
            raise _error(
                path, name, None, "not a valid profile name", "use letters, digits, '_', '.' or '-'"
            )
        if not isinstance(raw, dict):
            raise _error(
                path,
                name,
                None,
                f"expected a table, got {raw!r}",
                f"write a [{table_prefix}.{name}] section",
            )
        _check_table(raw, path, name)
    profiles = {}
    for name in tables:
        merged = _resolve(name, tables, path)
        if "model-path" not in merged and merged.get("kind") != "openai":
            raise _error(
                path,
                name,
                "model-path",
                "missing (also in the profiles it extends)",
                'add model-path = "ORG/MODEL" or a local path',
            )
        command = merged.get("command")
        profiles[name] = Profile(
            name=name,
            model_path=merged.get("model-path", ""),
            tp=int(merged.get("tp", 1)),
            args=tuple(merged["args"]),
            env=merged["env"],
            expect=merged["expect"],
            command=tuple(command) if command else None,
            source=str(path),
            kind=merged.get("kind", "sglang"),
        )
    return profiles


def _read_toml(path: Path, option: str) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            data: dict[str, Any] = tomllib.load(file)
            return data
    except FileNotFoundError:
        raise pytest.UsageError(
            f"{option}: profile file {path} does not exist; give the path of a TOML file "
            "with [profiles.NAME] sections"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise pytest.UsageError(f"{path}: not valid TOML: {exc}; fix the syntax") from None
    except UnicodeDecodeError as exc:
        # TOML is UTF-8 by definition; an editor that saved Latin-1 or UTF-16 is the usual cause.
        raise pytest.UsageError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}); a TOML file must be UTF-8: save it as UTF-8"
        ) from None


def load_profiles(pyproject: Path | None, profiles_file: Path | None) -> dict[str, Profile]:
    """Load profiles from ``pyproject.toml`` and/or a profiles file.

    :raises pytest.UsageError: on any invalid profile, or a name defined in both files.
    """
    profiles: dict[str, Profile] = {}
    if pyproject is not None and pyproject.is_file():
        data = _read_toml(pyproject, "pyproject.toml")
        tables = data.get("tool", {}).get("pytest-sglang", {}).get("profiles")
        if tables is not None:
            profiles.update(profiles_from_tables(tables, pyproject, "tool.pytest-sglang.profiles"))
    if profiles_file is not None:
        data = _read_toml(profiles_file, "--sglang-profiles")
        extra = profiles_from_tables(data.get("profiles", {}), profiles_file, "profiles")
        for name, profile in extra.items():
            if name in profiles:
                raise pytest.UsageError(
                    f"{profiles_file}: profile {name!r} is also defined in "
                    f"{profiles[name].source}; rename one of them"
                )
            profiles[name] = profile
    return profiles
