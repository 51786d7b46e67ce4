"""The server's own counters around a run: ``/metrics`` scraped before and after, as deltas.

Parsed with ``prometheus_client``; counters are summed over label sets, and a counter that
went down (a restart) refuses the delta. ``docs/metrics.md``, "Server-side counters", lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MetricsSnapshot", "ServerDelta", "delta", "parse_metrics", "scrape"]


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape: every sample's value summed over its label sets, by sample name."""

    samples: Mapping[str, float]

    def get(self, name: str) -> float | None:
        """Return the summed value of ``sglang:NAME`` (or of NAME itself), or None."""
        return self.samples.get(f"sglang:{name}", self.samples.get(name))


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition into a :class:`MetricsSnapshot`.

    :raises ValueError: the text is not Prometheus exposition format.
    """
    from prometheus_client.parser import text_string_to_metric_families

    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return MetricsSnapshot(totals)


def scrape(url: str, headers: Mapping[str, str] | None = None, timeout: float = 10.0) -> (
    MetricsSnapshot | None
):  # fmt: skip
    """Scrape ``URL/metrics``; None when the server does not serve metrics (404).

    :raises httpx.HTTPError: the server could not be reached or answered another error.
    """
    import httpx

    with httpx.Client(timeout=timeout, trust_env=False) as client:
        response = client.get(f"{url.rstrip('/')}/metrics", headers=dict(headers or {}))
    if response.status_code == 404:
        return None
    response.raise_for_status()
    return parse_metrics(response.text)


@dataclass(frozen=True)
class ServerDelta:
    """What the server counted between two scrapes."""

    requests: float
    prompt_tokens: float
    generation_tokens: float
    cached_tokens: float | None
    verify_calls: float | None
    queue_time_sum: float | None
    queue_time_count: float | None

    @property
    def acceptance_length(self) -> float | None:
        """Generated tokens per verify forward (speculative decoding only)."""
        if not self.verify_calls:
            return None
        return self.generation_tokens / self.verify_calls

    @property
    def cache_hit_ratio(self) -> float | None:
        """Prompt tokens served from the prefix cache, as a fraction of all prompt tokens."""
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens

    @property
    def mean_queue_time(self) -> float | None:
        """Seconds a request waited in the scheduler's queue, on average."""
        if not self.queue_time_count or self.queue_time_sum is None:
            return None
        return self.queue_time_sum / self.queue_time_count

    def as_dict(self) -> dict[str, Any]:
        """Return plain JSON types, with the derived figures."""
        return {
            "requests": self.requests,
            "prompt_tokens": self.prompt_tokens,
            "generation_tokens": self.generation_tokens,
            "cached_tokens": self.cached_tokens,
            "verify_calls": self.verify_calls,
            "acceptance_length": self.acceptance_length,
            "cache_hit_ratio": self.cache_hit_ratio,
            "mean_queue_time": self.mean_queue_time,
        }


def _diff(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> float | None:
    old, new = before.get(name), after.get(name)
    if old is None or new is None:
        return None
    if new < old:
        raise ValueError(
            f"sglang:{name} went down between the scrapes ({old:g} -> {new:g}): the server "
            "restarted during the run, so its counters say nothing about it"
        )
    return new - old


def delta(before: MetricsSnapshot, after: MetricsSnapshot) -> ServerDelta:
    """Return what the server counted between ``before`` and ``after``.

    :raises ValueError: a counter went down (the server restarted) or the scrapes lack the
        request and token counters (not SGLang's metrics).
    """
    required = [_diff(before, after, n) for n in ("num_requests_total", "generation_tokens_total")]
    if any(value is None for value in required):
        raise ValueError(
            "the scrapes have no sglang:num_requests_total or sglang:generation_tokens_total: "
            "is this SGLang's /metrics (launched with --enable-metrics)?"
        )
    return ServerDelta(
        requests=required[0] or 0.0,
        prompt_tokens=_diff(before, after, "prompt_tokens_total") or 0.0,
        generation_tokens=required[1] or 0.0,
        cached_tokens=_diff(before, after, "cached_tokens_total"),
        verify_calls=_diff(before, after, "spec_verify_calls_total"),
        queue_time_sum=_diff(before, after, "queue_time_seconds_sum"),
        queue_time_count=_diff(before, after, "queue_time_seconds_count"),
    )
