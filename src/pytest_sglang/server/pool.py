"""The session's servers: each attached server passes the readiness gate once.

A server whose gate failed is not polled again: later tests that need it fail at once with
the original cause instead of waiting for the ready timeout again (labgrid's "broken" state).
"""

from __future__ import annotations

from pytest_sglang.errors import ServerNotReady, ServerUnavailable
from pytest_sglang.server.handle import SGLangServer
from pytest_sglang.server.readiness import ReadinessGate
from pytest_sglang.settings import DEFAULT_SERVER_NAME, Settings

__all__ = ["ServerPool"]


class ServerPool:
    """Hands out ready servers by name and remembers failed ones for the session."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._ready: dict[str, SGLangServer] = {}
        self._failed: dict[str, ServerNotReady] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the configured servers, in the order they were given."""
        return tuple(s.name for s in self.settings.servers)

    def default_name(self) -> str:
        """Return the server a test without ``sglang_profile`` gets.

        :raises ServerUnavailable: when several servers are attached and none is ``default``.
        """
        names = self.names
        if len(names) == 1 or DEFAULT_SERVER_NAME in names:
            return names[0] if len(names) == 1 else DEFAULT_SERVER_NAME
        raise ServerUnavailable(
            f"several SGLang servers are attached ({', '.join(names)}) and this test does not "
            "say which one it needs; mark it with @pytest.mark.sglang_profile(NAME)"
        )

    def get(self, name: str) -> SGLangServer:
        """Return the ready server ``name``, running its readiness gate the first time.

        :raises ServerUnavailable: no server of that name is configured.
        :raises ServerNotReady: its gate failed, now or earlier in the session.
        """
        if name in self._ready:
            return self._ready[name]
        if name in self._failed:
            first = self._failed[name]
            raise type(first)(
                f"{first}\n  (this server failed its readiness gate earlier in the session; "
                "it is not polled again)",
                **_error_kwargs(first),
            )
        server = self.settings.server(name)
        if server is None:
            known = ", ".join(self.names) or "none"
            raise ServerUnavailable(
                f"no SGLang server named {name!r} is configured (attached: {known}); "
                f"attach it with --sglang-url {name}=URL"
            )
        gate = ReadinessGate(
            server.name,
            server.url,
            timeout=self.settings.ready_timeout.value,
            timeout_source=self.settings.ready_timeout.source,
            api_key=self.settings.api_key.value,
            expectations=self.settings.expectations_for(name),
        )
        try:
            ready = gate.wait()
        except ServerNotReady as exc:
            self._failed[name] = exc
            raise
        self._ready[name] = ready
        return ready

    def servers(self) -> tuple[SGLangServer, ...]:
        """Return the servers that passed their gate so far."""
        return tuple(self._ready.values())


def _error_kwargs(error: ServerNotReady) -> dict[str, str]:
    kwargs = {"phase": error.phase}
    json_path = getattr(error, "json_path", None)
    if json_path is not None:
        kwargs["json_path"] = json_path
    return kwargs
