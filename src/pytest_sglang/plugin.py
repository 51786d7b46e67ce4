"""pytest-sglang's pytest11 entry point: hooks and options only.

Work (network, processes) happens in fixtures, never here: ``pytest --help`` and
``pytest --collect-only`` run ``pytest_configure`` too, and must start nothing.
"""

from __future__ import annotations

import pytest

from pytest_sglang.fixtures import sglang_client, sglang_server, sglang_servers, sglang_settings
from pytest_sglang.markers import MARKERS, validate_markers
from pytest_sglang.settings import OPTIONS, SETTINGS_KEY, resolve_settings

__all__ = [
    "sglang_client",
    "sglang_server",
    "sglang_servers",
    "sglang_settings",
]


@pytest.hookimpl
def pytest_addoption(parser: pytest.Parser) -> None:
    """Register the ``sglang`` option group and the matching ini keys."""
    group = parser.getgroup("sglang", "SGLang server acceptance and performance testing")
    for spec in OPTIONS:
        if spec.flag:
            group.addoption(
                spec.cli, action="store_true", default=None, dest=spec.dest, help=spec.help
            )
        else:
            group.addoption(
                spec.cli,
                action="append" if spec.repeatable else "store",
                default=None,
                dest=spec.dest,
                metavar=spec.metavar,
                help=spec.help,
            )
        if spec.repeatable:
            parser.addini(spec.ini, spec.help, type="linelist", default=[])
        else:
            parser.addini(spec.ini, spec.help, type="string", default="")


@pytest.hookimpl
def pytest_configure(config: pytest.Config) -> None:
    """Register the markers and resolve the settings (validation only, no I/O)."""
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if config.option.help or config.option.version:
        return
    config.stash[SETTINGS_KEY] = resolve_settings(config)


@pytest.hookimpl
def pytest_report_header(config: pytest.Config) -> list[str] | None:
    """Show the effective settings, with the API key redacted."""
    settings = config.stash.get(SETTINGS_KEY, None)
    return settings.header_lines() if settings is not None else None


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Reject malformed ``sglang_*`` markers before anything runs."""
    validate_markers(items)
