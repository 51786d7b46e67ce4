"""How a server treats the client's connections, learned once per server and session.

Some servers close the TCP connection after every response while still advertising
keep-alive (llama.cpp's server, proxies, servers with a ``max`` keep-alive count). A pooled
client then hands its next request a connection whose close is on its way: the write goes
into a socket the server no longer reads, and the request fails before any byte of response
(``docs/metrics.md``, "Connections"). The load generator sends such a request again on a
fresh connection, but a run that learns the habit only then has already paid for it, and a
generator that forgets it between runs pays again in every run.

:class:`ConnectionHabits` is what the client learned; the server handle keeps one
(``SGLangServer.connections``) and every load generator for that server shares it, so the
first warm-up learns the habit (``LoadGenerator``'s probe: one more request on the pooled
connections right after the warm-up) and every later run of the session starts with a fresh
connection per request, never racing the server's close.
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

    @property
    def reuse(self) -> bool:
        """Whether a run may reuse pooled connections."""
        return self.closes_after_response is not True

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
