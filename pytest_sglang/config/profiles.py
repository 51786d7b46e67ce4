"""Server profiles: named launch recipes read from TOML (format in docs/guide.md).

``[tool.pytest-sglang.profiles.NAME]`` in ``pyproject.toml`` or ``[profiles.NAME]`` in the
``--sglang-profiles`` file; ``extends`` merges ``args`` flag by flag and ``env``/``expect`` key
by key. Validated by :mod:`.schema`; a mistake is a usage error naming file, table and key.
"""

from __future__ import annotations

import functools
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pytest

from pytest_sglang.config.redaction import Redactor, server_secrets, split_flags
from pytest_sglang.config.schema import profile_errors, toml_table
from pytest_sglang.config.values import Expectation

__all__ = ["MAX_EXTENDS_DEPTH", "Profile", "load_profiles", "merge_args"]

#: How many profiles one ``extends`` chain may hold (a chain this long is a mistake, and the
#: resolution must end in a clean error, not in Python's recursion limit).
MAX_EXTENDS_DEPTH = 32
#: The profile keys a profile's own value replaces (the others merge, flag by flag or by key).
_REPLACED = frozenset({"model-path", "tp", "command", "kind"})


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
        body = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return Redactor(server_secrets(self.args, self.env))(f"Profile({body})")


def _error(path: Path | str, prefix: str, name: str, key: str, problem: str, fix: str) -> Exception:
    table = toml_table(*prefix.split("."), name)
    return pytest.UsageError(f"{path}: {table} {key}: {problem}; {fix}")


def merge_args(base: list[str], override: list[str]) -> list[str]:
    """Merge two server argument lists flag by flag: ``override``'s values win, order kept."""
    merged: dict[str, list[str]] = {}
    for flag, values in split_flags(base) + split_flags(override):
        merged[flag.replace("_", "-")] = values
    return [token for flag, values in merged.items() for token in (flag, *values)]


def _chain(
    name: str, tables: Mapping[str, Mapping[str, Any]], path: Path | str, prefix: str
) -> list[str]:
    """Return ``name``'s ``extends`` chain, itself first; iterative, so any depth is safe."""
    chain, fail = [name], functools.partial(_error, path, prefix)
    while True:
        parent_name = tables[chain[-1]].get("extends")
        if parent_name is None:
            return chain
        if parent_name in chain:
            cycle = " -> ".join((*chain, parent_name))
            raise fail(name, "extends", f"cycle {cycle}", "remove an extends")
        if parent_name not in tables:
            fix = f"define {toml_table(*prefix.split('.'), parent_name)} or use one of "
            problem = f"no profile named {parent_name!r}"
            raise fail(chain[-1], "extends", problem, fix + ", ".join(sorted(tables)))
        chain.append(parent_name)
        if len(chain) > MAX_EXTENDS_DEPTH:
            shown = " -> ".join((*chain[:3], "...", chain[-1]))
            problem = f"the extends chain is more than {MAX_EXTENDS_DEPTH} profiles deep ({shown})"
            fix = "let profiles extend a common base instead of each other in a line"
            raise fail(name, "extends", problem, fix)


def profiles_from_tables(
    tables: Mapping[str, Any], path: Path | str, prefix: str
) -> dict[str, Profile]:
    """Validate the raw ``[prefix]`` tables of one file and resolve their ``extends``."""
    problems = profile_errors(tables, path, prefix)
    if problems:
        raise pytest.UsageError("\n".join(problems))
    profiles = {}
    for name in tables:
        # A Profile's keys, from its defaults up the chain (the schema has checked the types).
        merged: dict[str, Any] = {"model_path": "", "tp": 1, "args": [], "env": {}, "expect": {}}
        for link in reversed(_chain(name, tables, path, prefix)):
            raw = tables[link]
            merged |= {k.replace("-", "_"): v for k, v in raw.items() if k in _REPLACED}
            merged["args"] = merge_args(merged["args"], [str(a) for a in raw.get("args", [])])
            merged["env"] |= {k: str(v) for k, v in raw.get("env", {}).items()}
            merged["expect"] |= raw.get("expect", {})
        if not merged["model_path"] and merged.get("kind") != "openai":
            problem = "missing (also in the profiles it extends)"
            fix = 'add model-path = "ORG/MODEL" or a local path'
            raise _error(path, prefix, name, "model-path", problem, fix)
        merged["tp"] = int(merged["tp"])  # TOML's 8.0 passes the schema's "integer"
        merged["args"] = tuple(merged["args"])
        merged["command"] = tuple(merged["command"]) if "command" in merged else None
        profiles[name] = Profile(name=name, source=str(path), **merged)
    return profiles


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except OSError as exc:
        fix = "give the path of a readable TOML file"
        raise pytest.UsageError(f"{path}: cannot be read ({exc.strerror or exc}); {fix}") from None
    except tomllib.TOMLDecodeError as exc:
        raise pytest.UsageError(f"{path}: not valid TOML: {exc}; fix the syntax") from None
    except UnicodeDecodeError as exc:
        # TOML is UTF-8 by definition; an editor that saved Latin-1 or UTF-16 is the usual cause.
        raise pytest.UsageError(
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
            f"{exc.start}); a TOML file must be UTF-8: save it as UTF-8"
        ) from None


def load_profiles(pyproject: Path | None, profiles_file: Path | None) -> dict[str, Profile]:
    """Load the profiles of ``pyproject.toml`` and a profiles file (a name in both is an error)."""
    sources: list[tuple[Path, str, Any]] = []
    if pyproject is not None and pyproject.is_file():
        tool = _read_toml(pyproject).get("tool")
        ours = tool.get("pytest-sglang", {}) if isinstance(tool, dict) else {}
        if not isinstance(ours, dict):
            raise pytest.UsageError(
                f"{pyproject}: [tool.pytest-sglang]: expected a table, got {ours!r}; write "
                "[tool.pytest-sglang.profiles.NAME] sections"
            )
        if "profiles" in ours:
            sources.append((pyproject, "tool.pytest-sglang.profiles", ours["profiles"]))
    if profiles_file is not None:
        sources.append((profiles_file, "profiles", _read_toml(profiles_file).get("profiles", {})))
    profiles: dict[str, Profile] = {}
    for path, prefix, tables in sources:
        for name, profile in profiles_from_tables(tables, path, prefix).items():
            if name in profiles:
                raise pytest.UsageError(
                    f"{path}: profile {name!r} is also defined in "
                    f"{profiles[name].source}; rename one of them"
                )
            profiles[name] = profile
    return profiles
