"""Parsers for the option values no schema can check (the rest: :func:`~.schema.check_settings`).

Every error names the option, the value's source and the fix.
"""

from __future__ import annotations

import json
import re
from urllib.parse import urlsplit

import pytest

from pytest_sglang.config.defaults import DEFAULT_SERVER_NAME
from pytest_sglang.config.options import EXPECT, HEADER, OptionSpec
from pytest_sglang.config.redaction import redact
from pytest_sglang.config.values import NAME_RE, Expectation, Header, ServerUrl

__all__ = ["parse_expectation", "parse_header", "parse_server_url", "usage_error"]

#: The scheme prefix that declares a plain OpenAI-compatible server: ``openai+http://h:8000``.
_OPENAI_PREFIX = "openai+"
#: An HTTP header name (RFC 9110 token characters).
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_EXPECT_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def usage_error(spec: OptionSpec, source: str, problem: str, fix: str) -> pytest.UsageError:
    """Return the one configuration error: what is wrong, where it came from, how to fix it.

    Redacted: the value quoted may carry a secret (an --api-key in args, user:pw@ in a URL).
    """
    return pytest.UsageError(redact(f"{spec.label}: {problem} (from {source}); {fix}"))


def parse_server_url(spec: OptionSpec, raw: str, source: str) -> ServerUrl:
    """Parse ``URL`` or ``NAME=URL`` into a :class:`ServerUrl`, validating both parts."""
    name, sep, url = raw.partition("=")
    # A bare URL may itself contain '=' in a query string; only a NAME= prefix without
    # "://" before the '=' counts as a name.
    if not sep or "://" in name:
        name, url = DEFAULT_SERVER_NAME, raw
    name, url = name.strip(), url.strip()
    kind = "sglang"
    if url.startswith(_OPENAI_PREFIX):
        kind, url = "openai", url[len(_OPENAI_PREFIX) :]
    if not NAME_RE.match(name):
        raise usage_error(
            spec,
            source,
            f"server name {name!r} in {raw!r} is not valid",
            "use letters, digits, '_', '.' or '-', e.g. eagle3=http://gpu-host:30000",
        )
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed or stray bracket
        raise usage_error(
            spec,
            source,
            f"URL {url!r} is not a valid URL ({exc})",
            "write an IPv6 address in closed brackets, e.g. http://[::1]:30000"
            if "IPv6" in str(exc)
            else "write it as http://HOST:PORT, e.g. http://127.0.0.1:30000",
        ) from None
    if parts.scheme not in {"http", "https"}:
        example = f"http://{url}" if "://" not in url else "http://127.0.0.1:30000"
        raise usage_error(
            spec,
            source,
            f"URL {url!r} has no http:// or https:// scheme"
            if "://" not in url
            else f"URL {url!r} has scheme {parts.scheme!r}, not http or https",
            f"write it with a scheme, e.g. {example}",
        )
    if not parts.hostname:
        raise usage_error(
            spec,
            source,
            f"URL {url!r} has no host",
            "write it as http://HOST:PORT, e.g. http://127.0.0.1:30000",
        )
    try:
        parts.port  # noqa: B018 - urlsplit validates the port lazily, on access
    except ValueError:
        raise usage_error(
            spec,
            source,
            f"URL {url!r} has an invalid port",
            "give a port between 1 and 65535, e.g. http://127.0.0.1:30000",
        ) from None
    _check_usable(spec, source, url)
    if parts.username is not None or parts.password is not None:
        # Refused rather than turned into auth: SGLang reads a Bearer key, and a password in
        # a URL ends up in every message, report and JUnit file that names the server.
        raise usage_error(
            spec,
            source,
            f"URL {url!r} carries credentials (user:password@)",
            "give the URL without them, e.g. http://"
            f"{parts.hostname}{':' + str(parts.port) if parts.port else ''}, and the server's "
            "API key with --sglang-api-key or PYTEST_SGLANG_API_KEY (sent as a Bearer token; "
            "never printed)",
        )
    if parts.query or parts.fragment:
        raise usage_error(
            spec,
            source,
            f"URL {url!r} has a query or fragment",
            "give the server's base URL only, e.g. http://127.0.0.1:30000",
        )
    return ServerUrl(name=name, url=url.rstrip("/"), source=source, kind=kind)


def _check_usable(spec: OptionSpec, source: str, url: str) -> None:
    """Refuse a URL the HTTP client would refuse in every test (a host that is no IDNA name)."""
    import httpx  # only when a URL is given; every probe and request goes through it

    try:
        httpx.URL(url)
    except httpx.InvalidURL as exc:
        what = "has a host name that" if "host" in str(exc).lower() else "is a URL that"
        raise usage_error(
            spec,
            source,
            f"URL {url!r} {what} cannot be used ({exc})",
            "write the host as an IP address or a DNS name (letters, digits, '-' and '.'; "
            "a non-ASCII name must be a valid internationalised domain name), "
            "e.g. http://gpu-host:30000",
        ) from None


def parse_header(raw: str, source: str, spec: OptionSpec = HEADER) -> Header:
    """Parse ``[NAME:]HEADER=VALUE`` (``vllm:Authorization=Bearer KEY``) into a :class:`Header`.

    The value may contain ``=`` and ``:``; error messages never quote it.
    """
    head, sep, value = raw.partition("=")
    server, colon, name = head.rpartition(":")
    server_name = server.strip() if colon else None
    name = name.strip()
    if not sep or not name:
        # Without '=' the text may be "Authorization: Bearer KEY": it is not quoted.
        raise usage_error(
            spec,
            source,
            "no '=' between a header name and its value: not HEADER=VALUE (the text is not "
            "shown: it may hold the secret)",
            "write e.g. Authorization=Bearer KEY, or vllm:Authorization=Bearer KEY for one server",
        )
    if server_name is not None and not NAME_RE.match(server_name):
        raise usage_error(
            spec,
            source,
            f"server name {server_name!r} before {name!r} is not valid",
            "use letters, digits, '_', '.' or '-' before the ':'",
        )
    if not _HEADER_NAME_RE.match(name):
        # A name with spaces may be "Authorization: Bearer KEY" written before an '=': shown
        # only when it is one word.
        shown = repr(name) if len(name.split()) == 1 else "the text before '='"
        raise usage_error(
            spec,
            source,
            f"{shown} is not an HTTP header name",
            "use letters, digits and '-', e.g. Authorization or X-Api-Key",
        )
    if "\r" in value or "\n" in value:
        raise usage_error(
            spec, source, f"the value of {name!r} holds a line break", "give a one-line value"
        )
    return Header(name=name, value=value.strip(), source=source, server=server_name)


def parse_expectation(raw: str, source: str, spec: OptionSpec = EXPECT) -> Expectation:
    """Parse ``[NAME:]KEY=VALUE``; VALUE is decoded as JSON when it is valid JSON."""
    head, sep, value_text = raw.partition("=")
    if not sep or not head.strip():
        raise usage_error(
            spec,
            source,
            f"{raw!r} is not KEY=VALUE",
            "write e.g. max_model_len=131072, tp_size=8 or eagle3:speculative_algorithm=EAGLE3",
        )
    server, colon, key = head.rpartition(":")
    server_name = server.strip() if colon else None
    key = key.strip()
    if server_name is not None and not NAME_RE.match(server_name):
        raise usage_error(
            spec,
            source,
            f"server name {server_name!r} in {raw!r} is not valid",
            "use letters, digits, '_', '.' or '-' before the ':'",
        )
    if not _EXPECT_KEY_RE.match(key):
        raise usage_error(
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
