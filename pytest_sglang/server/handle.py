"""The server handle that ``sglang_server`` returns, and the plain types of the server stage."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sglang.loadgen.records import ConnectionHabits

if TYPE_CHECKING:
    import httpx

__all__ = [
    "KILLED_AT_ONCE",
    "OPENAI_NOT_APPLICABLE",
    "LaunchInfo",
    "ModelCard",
    "ReadinessTimings",
    "SGLangServer",
    "StopReport",
    "effective_max_running_requests",
    "local_vocab_size",
]


#: What a stop record says of a launch killed at once by a second Ctrl-C.
KILLED_AT_ONCE = "killed at once: interrupted again (no grace period)"


@dataclass
class StopReport:
    """What teardown did: exit code, signals sent, stragglers killed, when it ended (UTC)."""

    exit_code: int | None = None
    signals: list[str] = field(default_factory=list)
    stragglers: list[str] = field(default_factory=list)
    seconds: float = 0.0
    stopped_at: str | None = None


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
    #: The test that asked for the server (node id), when a test did.
    requested_by: str | None = None
    #: What that test asked it for, when the launch may have been avoidable (a measurement
    #: no test declared), for the summary's advice on relaunches.
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types, for reports."""
        return {**asdict(self), "log_path": str(self.log_path), "gpus": list(self.gpus)}


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


#: What the plugin reads from an SGLang server and a plain OpenAI-compatible one does not
#: serve (check -> why it did not apply): the report and the verdicts name them.
OPENAI_NOT_APPLICABLE = {
    "server_info": "no /server_info: its configuration (model path, TP size, context length, "
    "request cap, speculative settings) is unknown, so the verdicts cannot check it for "
    "confounders and sglang_expect can check model_id and max_model_len only",
    "server_counters": "no SGLang /metrics counters around the runs (requests, tokens, "
    "prefix-cache hits, queue time)",
    "server_timings": "no meta_info timings: TTFT is not split into queue and prefill",
    "acceptance_length": "no spec_verify_ct: no speculative acceptance length",
}


@dataclass(frozen=True)
class ReadinessTimings:
    """Seconds spent in each gate phase, in order, the probes sent, and the phases skipped (why)."""

    phases: dict[str, float]
    probes: int
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> float:
        """Seconds from the first probe to the gate passing."""
        return sum(self.phases.values())

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types, for reports."""
        timings = {"phases": dict(self.phases), "total": self.total, "probes": self.probes}
        return {**timings, "skipped": dict(self.skipped)} if self.skipped else timings


@dataclass(frozen=True)
class SGLangServer:
    """A server that passed the readiness gate (``server_info`` is empty for ``openai``)."""

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
    #: ``sglang``, or ``openai`` for a plain OpenAI-compatible server.
    kind: str = "sglang"
    #: Extra headers for every request (``--sglang-header``); values are secrets.
    extra_headers: dict[str, str] = field(default_factory=dict, repr=False)
    #: How it treats the client's connections, learned by the first run's warm-up and kept
    #: for every later run of the session (``loadgen/records.py``).
    connections: ConnectionHabits = field(default_factory=ConnectionHabits, repr=False,
                                          compare=False)  # fmt: skip

    @property
    def not_applicable(self) -> dict[str, str]:
        """The checks that do not apply to this server, and why (empty for SGLang)."""
        return dict(OPENAI_NOT_APPLICABLE) if self.kind == "openai" else {}

    @property
    def version(self) -> str | None:
        """SGLang's version as the server reports it, e.g. ``"0.5.23"``."""
        version = self.server_info.get("version")
        return str(version) if version is not None else None

    @property
    def headers(self) -> dict[str, str]:
        """HTTP headers every request needs: the API key, then ``--sglang-header`` (it wins)."""
        key = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        return {**key, **self.extra_headers}

    @property
    def max_running_requests(self) -> int | None:
        """The most requests the server runs at once, as its scheduler resolved it, or None."""
        return effective_max_running_requests(self.server_info)

    @property
    def context_length(self) -> int | None:
        """The effective context length: ``/v1/models``' ``max_model_len``."""
        return self.model.max_model_len

    @property
    def vocab_size(self) -> int | None:
        """The served model's vocabulary size, read from its ``config.json`` if on this machine.

        Use it as ``Workload(vocab_size=...)``; ``None`` when it cannot be learned here.
        """
        served = _first_count("vocab_size", self.model_info, self.server_info)
        path = self.server_info.get("model_path") or self.model_info.get("model_path")
        return served or (local_vocab_size(path) if isinstance(path, str) else None)

    def client(self, **kwargs: Any) -> httpx.Client:
        """Return a new httpx client bound to this server; the caller closes it."""
        import httpx

        kwargs.setdefault("timeout", httpx.Timeout(60.0, connect=10.0))
        # Like the gate and the load generator: no proxy from the environment in between.
        kwargs.setdefault("trust_env", False)
        return httpx.Client(base_url=self.url, headers=self.headers, **kwargs)


def effective_max_running_requests(server_info: dict[str, Any]) -> int | None:
    """Return the scheduler's request limit from a ``/server_info`` (see ``SGLangServer``)."""
    states = server_info.get("internal_states")
    key = "effective_max_running_requests_per_dp"
    per_rank = [_first_count(key, s) for s in states] if isinstance(states, list) else []
    if per_rank and None not in per_rank:  # every DP rank says
        return sum(filter(None, per_rank))
    return _first_count("max_running_requests", server_info)


def local_vocab_size(model_path: str) -> int | None:
    """Read ``vocab_size`` from ``MODEL_PATH/config.json`` if the directory is on this machine."""
    import json

    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    text = config.get("text_config") if isinstance(config, dict) else None
    return _first_count("vocab_size", text, config)


def _first_count(key: str, *sources: object) -> int | None:
    """Return the first positive int (not a bool) at ``key`` of the ``sources`` that are dicts."""
    for source in sources:
        value = source.get(key) if isinstance(source, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
