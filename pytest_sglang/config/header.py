"""The settings as ``pytest_report_header`` shows them (secrets redacted)."""

from __future__ import annotations

from pytest_sglang.config.settings import Settings

__all__ = ["header_lines"]


def header_lines(settings: Settings) -> list[str]:
    """Describe the effective settings for ``pytest_report_header`` (API key redacted)."""
    redact = settings.redact  # values the user gave may carry secrets: one rule for all
    servers = (
        redact(
            ", ".join(
                f"{s.name}={'openai+' if s.kind == 'openai' else ''}{s.url}"
                for s in settings.servers
            )
        )
        or "none"
    )
    key = "set, redacted" if settings.api_key.value else "not set"
    lines = [
        f"sglang: servers: {servers}"
        + (f" (from {settings.servers[0].source})" if settings.servers else ""),
        f"sglang: ready-timeout: {settings.ready_timeout.value:g}s "
        f"(from {settings.ready_timeout.source}); api-key: {key}"
        + (f" (from {settings.api_key.source})" if settings.api_key.value else "")
        + f"; require: {'yes' if settings.require.value else 'no'}",
    ]
    if settings.profiles:
        lines.append(
            f"sglang: launcher: {settings.launcher.value} (from {settings.launcher.source}); "
            f"profiles: {', '.join(settings.profiles)}"
            + (
                f"; emulator args: {redact(' '.join(settings.emulator_args.value))}"
                if settings.emulator_args.value and settings.launcher.value == "emulator"
                else ""
            )
        )
    # Shown only when set: the defaults would lengthen every header.
    if (settings.request_timeout.source, settings.stall_timeout.source) != ("default", "default"):
        lines.append(
            f"sglang: request-timeout: {settings.request_timeout.value:g}s "
            f"(from {settings.request_timeout.source}); stall-timeout: "
            f"{settings.stall_timeout.value:g}s (from {settings.stall_timeout.source})"
        )
    limits = (settings.first_token_timeout, settings.max_consecutive_failures)
    if any(limit.source != "default" for limit in limits):
        gives_up = settings.max_consecutive_failures.value or "never"
        lines.append(
            f"sglang: first-token-timeout: {settings.first_token_timeout.value:g}s (from "
            f"{settings.first_token_timeout.source}); max-consecutive-failures: {gives_up} "
            f"(from {settings.max_consecutive_failures.source})"
        )
    workers, ray = settings.load_workers, settings.ray_address
    if ray.value is not None:
        lines.append(
            f"sglang: load: {workers.value} Ray actor{'s' if workers.value > 1 else ''} on the "
            f"cluster at {ray.value} (from {ray.source})"
        )
    elif workers.value > 1:
        lines.append(
            f"sglang: load: {workers.value} processes on this host (from {workers.source})"
        )
    ci = [
        f"{name}: {option.value} (from {option.source})"
        for name, option in (("inconclusive", settings.inconclusive), ("shard", settings.shard))
        if option.source != "default"
    ]
    if ci:
        lines.append("sglang: " + "; ".join(ci))
    if settings.headers:
        # Names only: every value is a secret.
        lines.append("sglang: headers: " + ", ".join(h.describe() for h in settings.headers))
    if settings.expectations:
        described = ", ".join(e.describe() for e in settings.expectations)
        lines.append("sglang: expect: " + redact(described))
    return lines
