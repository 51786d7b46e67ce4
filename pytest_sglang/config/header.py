"""The settings as ``pytest_report_header`` shows them (secrets redacted)."""

from __future__ import annotations

from typing import Any

from pytest_sglang.config.settings import Settings
from pytest_sglang.config.values import Sourced

__all__ = ["header_lines"]


def _from(*values: Sourced[Any]) -> bool:
    return any(v.source != "default" for v in values)


def header_lines(settings: Settings) -> list[str]:
    """Describe the effective settings for ``pytest_report_header`` (secrets redacted)."""
    s, redact = settings, settings.redact  # values the user gave may carry secrets
    kinds = {"openai": "openai+"}
    servers = ", ".join(f"{v.name}={kinds.get(v.kind, '')}{v.url}" for v in s.servers)
    key = f"set, redacted (from {s.api_key.source})" if s.api_key.value else "not set"
    lines = [
        f"sglang: servers: {redact(servers) or 'none'}"
        + (f" (from {s.servers[0].source})" if s.servers else ""),
        f"sglang: ready-timeout: {s.ready_timeout.value:g}s (from {s.ready_timeout.source}); "
        f"api-key: {key}; require: {'yes' if s.require.value else 'no'}",
    ]
    if s.profiles:
        emulated = s.emulator_args.value and s.launcher.value == "emulator"
        args = f"; emulator args: {redact(' '.join(s.emulator_args.value))}" if emulated else ""
        lines.append(
            f"sglang: launcher: {s.launcher.value} (from {s.launcher.source}); "
            f"profiles: {', '.join(s.profiles)}{args}"
        )
    # Shown only when set: the defaults would lengthen every header.
    if _from(s.request_timeout, s.stall_timeout):
        lines.append(
            f"sglang: request-timeout: {s.request_timeout.value:g}s (from "
            f"{s.request_timeout.source}); stall-timeout: {s.stall_timeout.value:g}s (from "
            f"{s.stall_timeout.source})"
        )
    if _from(s.first_token_timeout, s.max_consecutive_failures):
        lines.append(
            f"sglang: first-token-timeout: {s.first_token_timeout.value:g}s (from "
            f"{s.first_token_timeout.source}); max-consecutive-failures: "
            f"{s.max_consecutive_failures.value or 'never'} (from "
            f"{s.max_consecutive_failures.source})"
        )
    workers, ray = s.load_workers, s.ray_address
    if ray.value is not None:
        actors = f"{workers.value} Ray actor{'s' if workers.value > 1 else ''}"
        lines.append(f"sglang: load: {actors} on the cluster at {ray.value} (from {ray.source})")
    elif workers.value > 1:
        lines.append(
            f"sglang: load: {workers.value} processes on this host (from {workers.source})"
        )
    ci = [
        f"{name}: {option.value} (from {option.source})"
        for name, option in (("inconclusive", s.inconclusive), ("shard", s.shard))
        if _from(option)
    ]
    if ci:
        lines.append("sglang: " + "; ".join(ci))
    if s.headers:  # names only: every value is a secret
        lines.append("sglang: headers: " + ", ".join(h.describe() for h in s.headers))
    if s.expectations:
        lines.append("sglang: expect: " + redact(", ".join(e.describe() for e in s.expectations)))
    return lines
