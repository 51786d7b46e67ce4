"""The one redaction rule: what is never printed or stored, and how it is hidden.

Every output of the plugin (terminal, messages, reports, JUnit properties, ``repr`` under
``pytest -l``, a launched server's log) passes through a :class:`Redactor`. Hidden, as
:data:`MASK`: known secrets (at least :data:`MIN_LITERAL` characters) wherever they appear;
the values of secret ``--flags``, of secret assignments (``api_key='sk-...'``,
``HF_TOKEN=...``, ``"password": "..."``); URL userinfo; ``Bearer``/``Basic`` credentials.
A *secret name* contains SECRET, PASSWORD or PASSWD, or TOKEN or KEY not followed by a
letter nor by a limit's or unit's word (``first_token_timeout``, ``draft_per_token_ms`` and
``fingerprint_key`` are no secrets). Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MASK",
    "MIN_LITERAL",
    "Redactor",
    "is_secret_name",
    "redact",
    "secret_flag_values",
    "server_secrets",
    "split_flags",
]

MASK = "***"
#: Known secrets at least this long are hidden wherever they appear as text.
MIN_LITERAL = 4

# "first-token-timeout" names a duration: TOKEN or KEY followed by a limit's or a unit's
# word is no secret, nor is a per-token figure or a lookup key (fingerprint_key, sort_key).
_SECRET_NAME = re.compile(
    r"(?:secret|password|passwd)"
    r"|(?<!per[-_])(?<!fingerprint[-_])(?<!sort[-_])(?<!cache[-_])"
    r"(?:token|key)(?![a-z]|[-_](?:timeout|limit|count|ms|s)\b)",
    re.IGNORECASE,
)
_NAME = r"[A-Za-z_][A-Za-z0-9_.-]*"
# A --flag's name; not the plugin's own --sglang-api-key, which its messages name ("from
# --sglang-api-key on the command line"): that value is a known secret, hidden as a literal.
_FLAG_NAME = r"--(?!sglang-)(?P<name>[A-Za-z][A-Za-z0-9_-]*)"
# --flag=value, --flag value (not a next --flag), and a list's repr: '--flag', 'value'.
_FLAG = re.compile(rf"(?P<head>{_FLAG_NAME}(?:=|\s+(?!-)))(?P<value>[^\s'\",\])}}]+)")
_FLAG_LISTED = re.compile(rf"(?P<head>{_FLAG_NAME}(?P<q>['\"]),\s*(?P=q))(?P<value>[^'\"]*)")
# name='value', name="value", "name": "value", 'name': 'value', name=value
_ASSIGN_QUOTED = re.compile(
    rf"(?P<head>(?P<nq>['\"]?)(?P<name>{_NAME})(?P=nq)\s*[:=]\s*(?P<q>['\"]))(?P<value>[^'\"]*)"
)
_ASSIGN_BARE = re.compile(
    rf"(?P<head>(?<![\w.-])(?P<name>{_NAME})=)(?P<value>(?!['\"]|[\w.]+\()[^\s,;)\]}}&]+)"
)
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<value>[^/@\s'\"]+)(?=@)")
_AUTH = re.compile(r"(?P<head>\b(?:Bearer|Basic)\s+)(?P<value>[A-Za-z0-9._~+/=-]+)")
#: Values that are no secrets even under a secret name: an unset key, a placeholder in a
#: usage message (``KEY=VALUE``).
_EMPTY = frozenset({"", MASK, "None", "null", "none", "NULL", "VALUE", "KEY"})


def is_secret_name(name: str) -> bool:
    """Return whether a variable, flag or key called ``name`` holds a secret."""
    return _SECRET_NAME.search(name) is not None


def split_flags(argv: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Group ``argv`` into (flag, values): a flag's values run to the next ``--`` token.

    ``--flag=value`` becomes (flag, [value]); a leading token that is no flag forms a group.
    """
    groups: list[tuple[str, list[str]]] = []
    for token in argv:
        if token.startswith("--") or not groups:
            flag, eq, value = token.partition("=")
            groups.append((flag, [value] if eq else []))
        else:
            groups[-1][1].append(token)
    return groups


def secret_flag_values(argv: Iterable[str]) -> list[str]:
    """Return the values of secret flags (``--api-key VALUE``, ``--api-key=VALUE``)."""
    return [
        values[0]
        for flag, values in split_flags(argv)
        if flag.startswith("--") and is_secret_name(flag[2:]) and values
    ]


def server_secrets(args: Iterable[object], env: Mapping[Any, Any]) -> list[str]:
    """Return the secrets in a server's args and env: secret flags' and secret names' values."""
    found = secret_flag_values(map(str, args))
    return found + [str(v) for k, v in env.items() if is_secret_name(str(k)) and v]


def _masked_if_secret(match: re.Match[str]) -> str:
    value = match.group("value")
    if is_secret_name(match.group("name")) and value not in _EMPTY:
        return match.group("head") + MASK
    return match.group(0)


def _masked(match: re.Match[str]) -> str:
    return match.group("head") + MASK


class Redactor:
    """The redaction rule bound to known secret values: ``redactor(text)``."""

    __slots__ = ("secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = tuple(sorted({s for s in secrets if s}))

    def __call__(self, text: str) -> str:
        """Return ``text`` with every secret (see the module docstring) replaced by ``***``."""
        for secret in sorted((s for s in self.secrets if len(s) >= MIN_LITERAL), key=len)[::-1]:
            text = text.replace(secret, MASK)
        if "://" in text:
            text = _USERINFO.sub(_masked, text)
        if "--" in text:
            text = _FLAG_LISTED.sub(_masked_if_secret, text)
            text = _FLAG.sub(_masked_if_secret, text)
        if "=" in text or ":" in text:
            text = _ASSIGN_QUOTED.sub(_masked_if_secret, text)
            text = _ASSIGN_BARE.sub(_masked_if_secret, text)
        if "Bearer" in text or "Basic" in text:
            text = _AUTH.sub(_masked, text)
        return text

    def json(self, value: Any) -> Any:
        """Return a copy of a JSON-like value, every string redacted; under a secret key, whole."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {
                k: MASK
                if isinstance(v, str) and is_secret_name(str(k)) and v not in _EMPTY
                else self.json(v)
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.json(item) for item in value]
        return value

    def argv(self, argv: Iterable[str]) -> list[str]:
        """Return a command line with secret flags' values (and known secrets) as ``***``."""
        out: list[str] = []
        hide = False
        for token in argv:
            flag, eq, _ = token.partition("=")
            secret = not hide and token.startswith("--") and is_secret_name(flag[2:])
            if hide:
                out.append(MASK)
            elif secret:
                out.append(f"{flag}={MASK}" if eq else token)
            else:
                out.append(self(token))
            hide = secret and not eq
        return out

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secrets)"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` redacted, ``secrets`` the known secret values to hide wherever found."""
    return Redactor(secrets)(text)
