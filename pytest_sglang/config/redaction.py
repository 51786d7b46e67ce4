"""The one redaction rule: what is never printed or stored, and how it is hidden.

Every output of the plugin (terminal, failure messages, reports, JUnit properties, the
``repr`` shown under ``pytest -l``, a launched server's log) passes through :func:`redact`
or :func:`redact_json`. It lives in the lowest stage so that every stage can use it.

What is hidden, each replaced by :data:`MASK`:

* **known secrets**, wherever they appear: the API key (``--sglang-api-key``), the values
  of ``--api-key``-like flags in a profile's ``args`` or ``sglang_emulator_args``, and
  the values of a profile's ``env`` whose names are secret (below). Values shorter than
  :data:`MIN_LITERAL` characters are not searched for as text (a one-character "secret"
  would blank every digit); the patterns below still catch them in context;
* **secret flags** in any command line or list: ``--api-key VALUE``, ``--api-key=VALUE``,
  ``'--admin-api-key', 'VALUE'``: every ``--flag`` whose name is secret;
* **secret assignments** in log lines and reprs: ``api_key='sk-...'`` (SGLang logs its
  ``server_args=ServerArgs(...)`` so), ``HF_TOKEN=hf_...``, ``"password": "..."``;
* **URL userinfo**: ``http://user:pw@host`` becomes ``http://***@host``;
* **authorization headers**: ``Bearer ...`` and ``Basic ...`` values.

A *secret name* contains ``SECRET``, ``PASSWORD`` or ``PASSWD``, or ``TOKEN`` or ``KEY``
not followed by a letter (any case): ``HF_TOKEN``, ``OPENAI_API_KEY``, ``api_key``,
``apiKey``, ``AWS_SECRET_ACCESS_KEY``, ``DB_PASSWORD``, but not ``tokenizer_path``,
``max_total_num_tokens``, ``ssl_keyfile``, ``first_token_timeout`` (a limit's or a unit's word
after it: timeout, limit, count, ms, s), ``draft_per_token_ms`` or ``fingerprint_key``, whose
values are no secrets and help a reader. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from pytest_sglang.config.flags import split_flags

__all__ = [
    "MASK",
    "MIN_LITERAL",
    "Redactor",
    "is_secret_name",
    "redact",
    "redact_json",
    "secret_flag_values",
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
# --flag=value, --flag value, and a list's repr: '--flag', 'value'.
_FLAG_EQ = re.compile(r"(?P<head>--(?P<name>[A-Za-z][A-Za-z0-9_-]*)=)(?P<value>[^\s'\",\])}]+)")
_FLAG_SPACE = re.compile(
    r"(?P<head>--(?P<name>[A-Za-z][A-Za-z0-9_-]*)\s+)(?P<value>(?!-)[^\s'\",\])}]+)"
)
_FLAG_LISTED = re.compile(
    r"(?P<head>--(?P<name>[A-Za-z][A-Za-z0-9_-]*)(?P<q>['\"]),\s*(?P=q))(?P<value>[^'\"]*)"
)
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


def secret_flag_values(argv: Iterable[str]) -> list[str]:
    """Return the values of secret flags (``--api-key VALUE``, ``--api-key=VALUE``)."""
    return [
        values[0]
        for flag, values in split_flags(argv)
        if flag.startswith("--") and is_secret_name(flag[2:]) and values
    ]


def _masked_if_secret(match: re.Match[str]) -> str:
    value = match.group("value")
    if is_secret_name(match.group("name")) and value not in _EMPTY:
        return match.group("head") + MASK
    return match.group(0)


def _masked_if_secret_flag(match: re.Match[str]) -> str:
    # The plugin's own --sglang-api-key is named in its messages ("from --sglang-api-key on
    # the command line"); its value is a known secret, hidden as a literal instead.
    if match.group("name").startswith("sglang-"):
        return match.group(0)
    return _masked_if_secret(match)


def _masked(match: re.Match[str]) -> str:
    return match.group("head") + MASK


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` with every secret (see the module docstring) replaced by ``***``.

    ``secrets`` are the known secret values to hide wherever they appear.
    """
    for secret in sorted({s for s in secrets if s and len(s) >= MIN_LITERAL}, key=len)[::-1]:
        text = text.replace(secret, MASK)
    if "://" in text:
        text = _USERINFO.sub(_masked, text)
    if "--" in text:
        text = _FLAG_LISTED.sub(_masked_if_secret_flag, text)
        text = _FLAG_EQ.sub(_masked_if_secret_flag, text)
        text = _FLAG_SPACE.sub(_masked_if_secret_flag, text)
    if "=" in text or ":" in text:
        text = _ASSIGN_QUOTED.sub(_masked_if_secret, text)
        text = _ASSIGN_BARE.sub(_masked_if_secret, text)
    if "Bearer" in text or "Basic" in text:
        text = _AUTH.sub(_masked, text)
    return text


def redact_argv(argv: Iterable[str], secrets: Iterable[str] = ()) -> list[str]:
    """Return a command line with secret flags' values (and known secrets) as ``***``."""
    out: list[str] = []
    hide_next = False
    known = tuple(secrets)
    for token in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        if token.startswith("--"):
            flag, eq, _ = token.partition("=")
            if is_secret_name(flag[2:]):
                out.append(f"{flag}={MASK}" if eq else token)
                hide_next = not eq
                continue
        out.append(redact(token, known))
    return out


def redact_json(value: Any, secrets: Iterable[str] = ()) -> Any:
    """Return a copy of a JSON-like value with every string redacted.

    A string under a secret key (``"api_key": "sk-..."``) is masked whole.
    """
    known = tuple(secrets)
    return _redact_json(value, known)


def _redact_json(value: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if isinstance(item, str) and is_secret_name(str(key)) and item not in _EMPTY:
                out[key] = MASK
            else:
                out[key] = _redact_json(item, secrets)
        return out
    if isinstance(value, (list, tuple)):
        return [_redact_json(item, secrets) for item in value]
    return value


class Redactor:
    """:func:`redact` bound to a session's known secrets: ``redactor(text)``."""

    __slots__ = ("secrets",)

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = tuple(sorted({s for s in secrets if s}))

    def __call__(self, text: str) -> str:
        """Return ``text`` redacted."""
        return redact(text, self.secrets)

    def json(self, value: Any) -> Any:
        """Return a JSON-like value redacted (see :func:`redact_json`)."""
        return _redact_json(value, self.secrets)

    def argv(self, argv: Iterable[str]) -> list[str]:
        """Return a command line redacted (see :func:`redact_argv`)."""
        return redact_argv(argv, self.secrets)

    def __repr__(self) -> str:
        return f"Redactor({len(self.secrets)} secrets)"
