"""One resolved target per server (attached, a profile to launch, or both), decided up front."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_sglang.config.values import Expectation, Header, ServerUrl

if TYPE_CHECKING:
    # Only the type: the profile module (tomllib) loads only when profiles exist.
    from pytest_sglang.config.profiles import Profile

__all__ = ["ServerTarget", "build_targets"]


@dataclass(frozen=True)
class ServerTarget:
    """A server the session knows: its name, how it is reached, what it must serve."""

    name: str
    #: The attached server's base URL, or None when the profile is launched.
    url: str | None
    #: The profile of that name, if any (launched when ``url`` is None).
    profile: Profile | None
    #: Identity checks for this server, in precedence order (one per key).
    expectations: tuple[Expectation, ...]
    #: Where the URL or the profile came from, for messages.
    source: str
    #: ``sglang``, or ``openai`` for a plain OpenAI-compatible server.
    kind: str = "sglang"
    #: Extra HTTP headers for this server (``--sglang-header``), in order; values secret.
    headers: tuple[Header, ...] = ()

    @property
    def header_map(self) -> dict[str, str]:
        """The extra headers as a mapping (a header given for this server wins)."""
        ordered = sorted(self.headers, key=lambda h: h.server is not None)  # this server's last
        return {h.name: h.value for h in ordered}


def build_targets(
    servers: Sequence[ServerUrl],
    profiles: Mapping[str, Profile],
    expectations: Sequence[Expectation],
    headers: Sequence[Header] = (),
) -> dict[str, ServerTarget]:
    """Return every known server by name: attached ones first, then profiles to launch."""
    attached = {s.name: s for s in servers}
    targets: dict[str, ServerTarget] = {}
    for name in (*attached, *(p for p in profiles if p not in attached)):
        server, profile = attached.get(name), profiles.get(name)
        own = tuple(e for e in expectations if e.server in (None, name))
        if profile is not None:  # the command line (or env, ini) wins over the profile's expect
            own += tuple(e for e in profile.expectations() if e.key not in {o.key for o in own})
        # An openai+ URL declares the kind; otherwise the profile of the same name may.
        kind = server.kind if server is not None and server.kind != "sglang" else None
        targets[name] = ServerTarget(
            name,
            server.url if server else None,
            profile,
            own,
            server.source if server else profile.source if profile else "",
            kind or (profile.kind if profile is not None else "sglang"),
            tuple(h for h in headers if h.server in (None, name)),
        )
    return targets
