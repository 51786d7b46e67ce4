"""The ``sglang_*`` fixtures: thin glue over settings, the server pool and the gate.

Heavy modules (httpx, jsonschema) are imported inside fixture bodies only, so that loading
the plugin stays cheap for every pytest run in the environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NoReturn

import pytest

from pytest_sglang.markers import expectations_of, profile_of
from pytest_sglang.settings import SETTINGS_KEY, Settings

if TYPE_CHECKING:
    import httpx

    from pytest_sglang.server.handle import SGLangServer
    from pytest_sglang.server.pool import ServerPool

__all__ = ["sglang_client", "sglang_server", "sglang_servers", "sglang_settings"]

_HOW_TO_ATTACH = (
    "attach one with --sglang-url=URL (or NAME=URL for @pytest.mark.sglang_profile(NAME)), "
    "the PYTEST_SGLANG_URL environment variable or the sglang_url ini key"
)


def _unavailable(settings: Settings, message: str) -> NoReturn:
    # Skip by default so that a GPU-less run of a suite is not a wall of errors; with
    # --sglang-require a missing server is a failure, as CI on GPU runners wants.
    if settings.require.value:
        pytest.fail(
            f"{message} (--sglang-require is set, from {settings.require.source})", pytrace=False
        )
    pytest.skip(message)


@pytest.fixture(scope="session")
def sglang_settings(pytestconfig: pytest.Config) -> Settings:
    """The plugin's effective settings (servers, ready timeout, API key, expectations).

    Each value carries the source it came from (command line, environment, ini or default).
    """
    return pytestconfig.stash[SETTINGS_KEY]


@pytest.fixture(scope="session")
def sglang_servers(sglang_settings: Settings) -> ServerPool:
    """The session's pool of SGLang servers, for session-scoped fixtures of your own.

    ``sglang_servers.get(NAME)`` returns the ready server called NAME, running the readiness
    gate once per session; a server whose gate failed is not polled again.
    """
    from pytest_sglang.server.pool import ServerPool

    return ServerPool(sglang_settings)


@pytest.fixture
def sglang_server(
    request: pytest.FixtureRequest, sglang_servers: ServerPool, sglang_settings: Settings
) -> SGLangServer:
    """The ready SGLang server this test runs against.

    The server named by the closest ``@pytest.mark.sglang_profile(NAME)``, else the single
    attached server (or the one named ``default``). It has passed the layered readiness
    gate: health, ``/v1/models`` schema, identity and ``/server_info`` checks. Tests are
    skipped when no server is configured, or fail under ``--sglang-require``.
    """
    from pytest_sglang.errors import ServerNotReady, ServerUnavailable
    from pytest_sglang.server.identity import (
        check_model_expectations,
        check_server_info_expectations,
    )

    if not sglang_settings.servers:
        _unavailable(sglang_settings, f"no SGLang server configured: {_HOW_TO_ATTACH}")
    # Fail or skip outside the except blocks so the report shows our message only, not
    # "during handling of the above exception".
    failure: str | None = None
    try:
        name = profile_of(request.node) or sglang_servers.default_name()
        server = sglang_servers.get(name)
    except ServerUnavailable as exc:
        failure = str(exc)
        unavailable = True
    except ServerNotReady as exc:
        failure = str(exc)
        unavailable = False
    if failure is not None:
        if unavailable:
            _unavailable(sglang_settings, failure)
        pytest.fail(failure, pytrace=False)
    expectations = expectations_of(request.node)
    problems = check_model_expectations(server.models, expectations)
    problems += check_server_info_expectations(server.server_info, expectations, "/server_info")
    if problems:
        pytest.fail(
            f"SGLang server {server.name!r} at {server.url} does not match this test's "
            "expectations:\n  " + "\n  ".join(problems),
            pytrace=False,
        )
    return server


@pytest.fixture
def sglang_client(sglang_server: SGLangServer) -> Iterator[httpx.Client]:
    """An httpx client bound to ``sglang_server`` (base URL, API key, timeouts).

    Relative paths work: ``sglang_client.get("/v1/models")``. Closed at teardown.
    """
    with sglang_server.client() as client:
        yield client
