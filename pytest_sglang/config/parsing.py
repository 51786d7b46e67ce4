"""Parsers for the option values no schema can check (the rest: :func:`~.schema.check_option`).

Every error names the option, the value's source and the fix.
"""

from __future__ import annotations

import functools
import json
import re
from urllib.parse import urlsplit

import pytest

from pytest_sglang.config.options import DEFAULT_SERVER_NAME, EXPECT, HEADER, OptionSpec
from pytest_sglang.config.redaction import redact
from pytest_sglang.config.values import NAME_RE, Expectation, Header, ServerUrl, Shard

__all__ = ["parse_expectation", "parse_header", "parse_server_url", "parse_shard", "usage_error"]

#: The scheme prefix that declares a plain OpenAI-compatible server: ``openai+http://h:8000``.
_OPENAI_PREFIX = "openai+"
#: An HTTP header name (RFC 9110 token characters).
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_EXPECT_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def usage_error(spec: OptionSpec, source: str, problem: str, fix: str) -> pytest.UsageError:
    """Return the one configuration error (what, where from, how to fix), redacted."""
    return pytest.UsageError(redact(f"{spec.label}: {problem} (from {source}); {fix}"))


def parse_server_url(spec: OptionSpec, raw: str, source: str) -> ServerUrl:
    """Parse ``URL`` or ``NAME=URL`` into a :class:`ServerUrl`, validating both parts."""
    fail = functools.partial(usage_error, spec, source)
    name, sep, url = raw.partition("=")
    # A bare URL may itself contain '=' in a query string; only a NAME= prefix without
    # "://" before the '=' counts as a name.
    if not sep or "://" in name:
        name, url = DEFAULT_SERVER_NAME, raw
    name, url = name.strip(), url.strip()
    kind = "openai" if url.startswith(_OPENAI_PREFIX) else "sglang"
    url = url.removeprefix(_OPENAI_PREFIX)
    example = "e.g. http://127.0.0.1:30000"
    if not NAME_RE.match(name):
        fix = "use letters, digits, '_', '.' or '-', e.g. eagle3=http://gpu-host:30000"
        raise fail(f"server name {name!r} in {raw!r} is not valid", fix)
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # "Invalid IPv6 URL": an unclosed or stray bracket
        fix = "write an IPv6 address in closed brackets, e.g. http://[::1]:30000"
        fix = fix if "IPv6" in str(exc) else f"write it as http://HOST:PORT, {example}"
        raise fail(f"URL {url!r} is not a valid URL ({exc})", fix) from None
    if parts.scheme not in {"http", "https"}:
        fix = f"write it with a scheme, e.g. http://{url}"
        if "://" not in url:
            raise fail(f"URL {url!r} has no http:// or https:// scheme", fix)
        problem = f"URL {url!r} has scheme {parts.scheme!r}, not http or https"
        raise fail(problem, f"write it with a scheme, {example}")
    if not parts.hostname:
        raise fail(f"URL {url!r} has no host", f"write it as http://HOST:PORT, {example}")
    try:
        parts.port  # noqa: B018 - urlsplit validates the port lazily, on access
    except ValueError:
        fix = f"give a port between 1 and 65535, {example}"
        raise fail(f"URL {url!r} has an invalid port", fix) from None
    import httpx  # only when a URL is given; every probe and request goes through it

    try:
        httpx.URL(url)  # refuse what the client would refuse in every test (no IDNA host)
    except httpx.InvalidURL as exc:
        what = "has a host name that" if "host" in str(exc).lower() else "is a URL that"
        raise fail(
            f"URL {url!r} {what} cannot be used ({exc})",
            "write the host as an IP address or a DNS name (letters, digits, '-' and '.'; "
            "a non-ASCII name must be a valid internationalised domain name), "
            "e.g. http://gpu-host:30000",
        ) from None
    if parts.username is not None or parts.password is not None:
        # Refused rather than turned into auth: SGLang reads a Bearer key, and a password in
        # a URL ends up in every message, report and JUnit file that names the server.
        raise fail(
            f"URL {url!r} carries credentials (user:password@)",
            "give the URL without them, e.g. http://"
            f"{parts.hostname}{':' + str(parts.port) if parts.port else ''}, and the server's "
            "API key with --sglang-api-key or PYTEST_SGLANG_API_KEY (sent as a Bearer token; "
            "never printed)",
        )
    if parts.query or parts.fragment:
        fix = f"give the server's base URL only, {example}"
        raise fail(f"URL {url!r} has a query or fragment", fix)
    return ServerUrl(name=name, url=url.rstrip("/"), source=source, kind=kind)


def parse_header(raw: str, source: str, spec: OptionSpec = HEADER) -> Header:
    """Parse ``[NAME:]HEADER=VALUE`` (``vllm:Authorization=Bearer KEY``) into a :class:`Header`.

    The value may contain ``=`` and ``:``; error messages never quote it.
    """
    fail = functools.partial(usage_error, spec, source)
    head, sep, value = raw.partition("=")
    server, colon, name = head.rpartition(":")
    server_name = server.strip() if colon else None
    name = name.strip()
    if not sep or not name:
        # Without '=' the text may be "Authorization: Bearer KEY": it is not quoted.
        raise fail(
            "no '=' between a header name and its value: not HEADER=VALUE (the text is not "
            "shown: it may hold the secret)",
            "write e.g. Authorization=Bearer KEY, or vllm:Authorization=Bearer KEY for one server",
        )
    if server_name is not None and not NAME_RE.match(server_name):
        problem = f"server name {server_name!r} before {name!r} is not valid"
        raise fail(problem, "use letters, digits, '_', '.' or '-' before the ':'")
    if not _HEADER_NAME_RE.match(name):
        # A name with spaces may be "Authorization: Bearer KEY" written before an '=': shown
        # only when it is one word.
        shown = repr(name) if len(name.split()) == 1 else "the text before '='"
        fix = "use letters, digits and '-', e.g. Authorization or X-Api-Key"
        raise fail(f"{shown} is not an HTTP header name", fix)
    if "\r" in value or "\n" in value:
        raise fail(f"the value of {name!r} holds a line break", "give a one-line value")
    return Header(name=name, value=value.strip(), source=source, server=server_name)


def parse_expectation(raw: str, source: str, spec: OptionSpec = EXPECT) -> Expectation:
    """Parse ``[NAME:]KEY=VALUE``; VALUE is decoded as JSON when it is valid JSON."""
    fail = functools.partial(usage_error, spec, source)
    head, sep, value_text = raw.partition("=")
    if not sep or not head.strip():
        fix = "write e.g. max_model_len=131072, tp_size=8 or eagle3:speculative_algorithm=EAGLE3"
        raise fail(f"{raw!r} is not KEY=VALUE", fix)
    server, colon, key = head.rpartition(":")
    server_name = server.strip() if colon else None
    key = key.strip()
    if server_name is not None and not NAME_RE.match(server_name):
        problem = f"server name {server_name!r} in {raw!r} is not valid"
        raise fail(problem, "use letters, digits, '_', '.' or '-' before the ':'")
    if not _EXPECT_KEY_RE.match(key):
        fix = "use model_id, max_model_len or a /server_info key such as tp_size"
        raise fail(f"key {key!r} in {raw!r} is not valid", fix)
    try:
        value: object = json.loads(value_text)
    except ValueError:
        value = value_text.strip()
    return Expectation(key=key, value=value, source=source, server=server_name)


def parse_shard(raw: str) -> Shard:
    """Parse ``K/N`` (shape checked by the schema); ``ValueError(problem, fix)`` unless 1<=K<=N."""
    index, count = (int(part) for part in raw.split("/"))
    if not 1 <= index <= count:
        problem = f"{raw!r}: K must be between 1 and N, and N at least 1"
        raise ValueError(problem, "give K/N with 1 <= K <= N, e.g. 1/2 and 2/2 on two runners")
    return Shard(index, count)
