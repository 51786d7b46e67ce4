"""How a server treats the client's connections, learned once per server and session.

Some servers close the connection after every response while advertising keep-alive, so a
pooled request fails before any response byte (``docs/metrics.md``, "Connections"). The
server handle keeps one :class:`ConnectionHabits` for every load generator of that server:
the first warm-up's probe learns the habit, later runs start with a fresh connection each.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ConnectionHabits"]


@dataclass
class ConnectionHabits:
    """Whether a server keeps connections open between requests (``None``: not known yet)."""

    #: ``True``: the server closes connections after a response (a fresh one per request);
    #: ``False``: a connection was reused for a second request; ``None``: not known yet.
    closes_after_response: bool | None = None
    #: What showed it, for the report and for messages.
    evidence: str = ""

    def closes(self, evidence: str) -> None:
        """Note that the server closed a connection after a response."""
        if self.closes_after_response is not True:
            self.closes_after_response = True
            self.evidence = evidence

    def keeps(self, evidence: str) -> None:
        """Note that a connection served a second request (unless a close was seen)."""
        if self.closes_after_response is None:
            self.closes_after_response = False
            self.evidence = evidence
