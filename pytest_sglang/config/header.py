"""The settings as ``pytest_report_header`` shows them (secrets redacted)."""

from __future__ import annotations

from typing import Any

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import Sourced

__all__ = ["header_lines"]


#: Lines shown only when one of their settings is set: the defaults would lengthen every header.
_WHEN_SET = (
    ("request_timeout", "stall_timeout"),
    ("first_token_timeout", "max_consecutive_failures"),
    ("inconclusive",),
    ("shard",),
)


def _shown(name: str, option: Sourced[Any]) -> str:
    """Return ``name: value (from source)``, seconds as ``90s``, a count of 0 as ``never``."""
    value = option.value
    text = f"{value:g}s" if isinstance(value, float) else value or "never"
    return f"{name.replace('_', '-')}: {text} (from {option.source})"


def header_lines(settings: Settings) -> list[str]:
    """Describe the effective settings for ``pytest_report_header`` (secrets redacted)."""
    s, redact = settings, settings.redact  # values the user gave may carry secrets
    kinds = {"openai": "openai+"}
    servers = ", ".join(f"{v.name}={kinds.get(v.kind, '')}{v.url}" for v in s.servers)
    key = f"set, redacted (from {s.api_key.source})" if s.api_key.value else "not set"
    lines = [
        f"sglang: servers: {redact(servers) or 'none'}"
        + (f" (from {s.servers[0].source})" if s.servers else ""),
        f"sglang: {_shown('ready-timeout', s.ready_timeout)}; api-key: {key}; "
        f"require: {'yes' if s.require.value else 'no'}",
    ]
    if s.profiles:
        emulated = s.emulator_args.value and s.launcher.value == "emulator"
        args = f"; emulator args: {redact(' '.join(s.emulator_args.value))}" if emulated else ""
        lines.append(
            f"sglang: {_shown('launcher', s.launcher)}; profiles: {', '.join(s.profiles)}{args}"
        )
    for names in _WHEN_SET:
        options = {name: getattr(s, name) for name in names}
        if any(option.source != "default" for option in options.values()):
            lines.append("sglang: " + "; ".join(_shown(*item) for item in options.items()))
    workers, ray = s.load_workers, s.ray_address
    if ray.value is not None:
        actors = f"{workers.value} Ray actor{'s' if workers.value > 1 else ''}"
        lines.append(f"sglang: load: {actors} on the cluster at {ray.value} (from {ray.source})")
    elif workers.value > 1:
        lines.append(
            f"sglang: load: {workers.value} processes on this host (from {workers.source})"
        )
    if s.headers:  # names only: every value is a secret
        lines.append("sglang: headers: " + ", ".join(h.describe() for h in s.headers))
    if s.expectations:
        lines.append("sglang: expect: " + redact(", ".join(e.describe() for e in s.expectations)))
    return lines
