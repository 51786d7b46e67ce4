"""The server handle that ``sglang_server`` returns: identity, configuration and timings.

The bottom of the server stage: the plain types every other server module hands around
(a launch's record, its stop report), importing nothing else of the plugin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

__all__ = ["LaunchInfo", "ModelCard", "ReadinessTimings", "SGLangServer", "StopReport"]


@dataclass
class StopReport:
    """What teardown did: exit code, signals sent, stragglers found and killed."""

    exit_code: int | None = None
    signals: list[str] = field(default_factory=list)
    stragglers: list[str] = field(default_factory=list)
    seconds: float = 0.0
    #: Exit codes psutil collected while waiting (it reaps our own children).
    reaped: dict[int, int | None] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, object]:
        """Return plain JSON types, for reports."""
        return {
            "exit_code": self.exit_code,
            "signals": list(self.signals),
            "stragglers": list(self.stragglers),
            "seconds": self.seconds,
        }


@dataclass
class LaunchInfo:
    """What the plugin knows of one launch, for messages and the report."""

    profile: str
    launcher: str
    command: list[str]  # secrets redacted
    log_path: Path
    port: int = 0
    pid: int | None = None
    gpus: tuple[str, ...] = ()
    #: ``starting``, ``ready``, ``stopped``, ``failed`` (the launch) or ``died`` (later).
    outcome: str = "starting"
    #: Why a launch failed or a server died, in a line (secrets redacted).
    cause: str | None = None
    #: The process's exit code once known (negative: ended by that signal).
    exit_code: int | None = None
    seconds_to_ready: float | None = None
    readiness: dict[str, float] = field(default_factory=dict)
    stop: StopReport | None = None
    release_seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types, for reports."""
        return {
            "profile": self.profile,
            "launcher": self.launcher,
            "command": self.command,
            "log_path": str(self.log_path),
            "port": self.port,
            "pid": self.pid,
            "gpus": list(self.gpus),
            "outcome": self.outcome,
            "cause": self.cause,
            "exit_code": self.exit_code,
            "seconds_to_ready": self.seconds_to_ready,
            "readiness": dict(self.readiness),
            "stop": self.stop.as_dict() if self.stop else None,
            "release_seconds": self.release_seconds,
        }


@dataclass(frozen=True)
class ModelCard:
    """One entry of ``GET /v1/models``."""

    id: str
    max_model_len: int | None
    root: str | None
    parent: str | None
    owned_by: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, card: dict[str, Any]) -> ModelCard:
        """Build a card from a schema-valid ``/v1/models`` entry."""
        return cls(
            id=card["id"],
            max_model_len=card.get("max_model_len"),
            root=card.get("root"),
            parent=card.get("parent"),
            owned_by=card.get("owned_by", ""),
            raw=card,
        )


@dataclass(frozen=True)
class ReadinessTimings:
    """Seconds spent in each readiness-gate phase, in order, and the number of probes sent."""

    phases: dict[str, float]
    probes: int

    @property
    def total(self) -> float:
        """Seconds from the first probe to the gate passing."""
        return sum(self.phases.values())

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types, for reports."""
        return {"phases": dict(self.phases), "total": self.total, "probes": self.probes}


@dataclass(frozen=True)
class SGLangServer:
    """A server that passed the readiness gate.

    ``model`` is the served model's card from ``/v1/models``; ``server_info`` the flat
    resolved server arguments from ``/server_info`` (or ``/get_server_info`` on older
    releases); ``version`` SGLang's version string from it.
    """

    name: str
    url: str
    model: ModelCard
    models: tuple[ModelCard, ...]
    model_info: dict[str, Any] = field(repr=False)
    server_info: dict[str, Any] = field(repr=False)
    readiness: ReadinessTimings
    api_key: str | None = field(default=None, repr=False)
    #: Launch details (command, pid, port, log) when the plugin launched this server.
    launch: LaunchInfo | None = field(default=None, repr=False)

    @property
    def version(self) -> str | None:
        """SGLang's version as the server reports it, e.g. ``"0.5.23"``."""
        version = self.server_info.get("version")
        return str(version) if version is not None else None

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers every request to this server needs (the API key, when set)."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def client(self, **kwargs: Any) -> httpx.Client:
        """Return a new httpx client bound to this server; the caller closes it."""
        import httpx

        kwargs.setdefault("timeout", httpx.Timeout(60.0, connect=10.0))
        # Like the gate and the load generator: no proxy from the environment in between.
        kwargs.setdefault("trust_env", False)
        return httpx.Client(base_url=self.url, headers=self.headers, **kwargs)
